"""The MediaMath report demo (examples/mediamath_report.py) runs end to end as a script, at a small
size, and its own books balance: late firings updated windows, late data reached the side output,
and reported spend + late spend == generated spend."""

from __future__ import annotations

import os
import re
import subprocess
import sys

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "mediamath_report.py")


def test_mediamath_demo_updates_windows_counts_late_data_and_balances(tmp_path):
    env = dict(os.environ, KEYSPAN_DEMO_DIR=str(tmp_path / "demo"), KEYSPAN_HOME=str(tmp_path / ".keyspan"))
    # 8 hours: the watermark stops at the last impression, so data must outlast the 3 h lateness
    # (plus the hour) for very late impressions to miss their window
    run = subprocess.run([sys.executable, DEMO, "--impressions", "2000", "--campaigns", "3", "--hours", "8",
                          "--show", "1"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert run.returncode == 0, f"demo failed ({run.returncode}):\n{out}\n{run.stderr[-4000:]}"

    epochs = int(re.search(r"processed 2,000 impressions in (\d+) epochs", out).group(1))
    assert epochs > 8  # one hourly arrival file per epoch: 8 hours of data plus the late tail
    m = re.search(r"windows reported: (\d+)\s+firings: (\d+)\s+updates: (\d+)", out)
    windows, firings, updates = map(int, m.groups())
    assert windows == 3 * 8  # every campaign has impressions in every hour
    assert updates > 0 and firings == windows + updates
    late = int(re.search(r"late impressions \(side output 'late'\): (\d+)", out).group(1))
    assert late > 0
    assert re.search(r"check: .* -> +OK$", out, re.M), out
    # the sink shows a window's first report and then its update, with the new spend
    assert re.search(r"^campaign +1 hour \S+ spend +[\d.,]+ .*first report", out, re.M)
    assert re.search(r"^campaign +1 hour \S+ spend +[\d.,]+ .*update #2", out, re.M)
