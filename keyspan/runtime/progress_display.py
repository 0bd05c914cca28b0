"""What a running job shows while it runs: a live rich panel on a terminal (stdout redirected above
it, so print-sink output never glues onto it), one plain log line every N epochs otherwise.

It shows the current rate (records/s over the last seconds, not an average since the start), the
last epoch's time, the watermark lag and the last checkpoint's size, taken from the job's metrics.
"""

from __future__ import annotations

import sys

from keyspan.common.formatting import human_bytes
from keyspan.common.logs import get_logger

log = get_logger("keyspan.progress")


def _duration(ms) -> str:
    if ms is None:
        return "-"
    return f"{ms:,.0f} ms" if ms < 10_000 else f"{ms / 1000:,.1f} s"


class ProgressDisplay:
    """Drop-in for the runner's progress counters (``epochs``, ``records``, ``last_checkpoint``,
    ``skipped``, ``update()``, ``done()``); ``metrics`` is the job's :class:`JobMetrics` once known."""

    def __init__(self, enabled: bool, every: int | None = None, stream=None):
        from keyspan.common.settings import load

        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.every = every or load().progress_every
        self.epochs = 0
        self.records = 0
        self.last_checkpoint = None
        self.skipped = 0
        self.metrics = None
        self.live = None
        self._logged_epochs = 0
        self.tty = enabled and self.stream.isatty()

    def line(self) -> str:
        s = self.metrics.summary() if self.metrics is not None else {}
        cp = s.get("last_checkpoint") or {}
        lags = s.get("watermark_lag_ms") or {}
        lag = _duration(max(lags.values())) if lags else "-"
        return (f"epochs {self.epochs:,}  records {self.records:,}  {s.get('records_per_second', 0):,.0f} rec/s  "
                f"last epoch {_duration(s.get('last_epoch_ms'))}  watermark lag {lag}  "
                f"last checkpoint {self.last_checkpoint if self.last_checkpoint is not None else '-'} "
                f"({human_bytes(cp.get('size'))})")

    def _renderable(self):
        from rich.text import Text

        return Text(self.line(), style="bold cyan")

    def update(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            if self.live is None:
                from rich.console import Console
                from rich.live import Live

                self.live = Live(self._renderable(), console=Console(file=self.stream), refresh_per_second=4,
                                 redirect_stdout=True, redirect_stderr=False, transient=False)
                self.live.start()
            else:
                self.live.update(self._renderable())
        elif self.epochs - self._logged_epochs >= self.every:
            self._logged_epochs = self.epochs
            log.info(self.line())

    def done(self) -> None:
        if not self.enabled:
            return
        if self.live is not None:
            self.live.update(self._renderable())
            self.live.stop()
            self.live = None
        elif not self.tty and self.epochs != self._logged_epochs:
            self._logged_epochs = self.epochs
            log.info(self.line())
