"""Kafka → keyed state → Kafka EXACTLY_ONCE with the driver SIGKILLed (with its JVM and Python
workers) several times mid-run and restarted: a read_committed consumer sees every expected output
record exactly once, and nothing of an uncommitted epoch."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka", reason="confluent-kafka (keyspan[kafka]) is not installed")

from job_processes import crash_seed, run_with_kills, start_job  # noqa: E402
from kafka_util import new_topic, produce, read_all  # noqa: E402

JOB = Path(__file__).parent / "jobs" / "kafka_counting_job.py"
RECORDS, KEYS = 1200, 30  # 24 epochs of 50: three kills, each 1-2 epochs plus a moment into a run, land well before the end


def _run(workdir: Path, bootstrap: str, source: str, target: str, extra=()):
    return start_job(JOB, workdir, {"KAFKA_JOB_BOOTSTRAP": bootstrap, "KAFKA_JOB_SOURCE": source,
                                    "KAFKA_JOB_TARGET": target, "KAFKA_JOB_PER_EPOCH": "50"}, extra)


@pytest.mark.timeout(1800)  # four driver starts (a JVM each) on a shared two-core machine
def test_sigkill_driver_repeatedly_read_committed_sees_each_output_once(tmp_path, kafka_broker):
    source, target = new_topic(kafka_broker, 3), new_topic(kafka_broker, 2)
    produce(kafka_broker, source, [(None, f"key-{i % KEYS:02d}") for i in range(RECORDS)],
            partition_of=lambda i: i % 3)
    expected = Counter(f"key-{k:02d}:{n}" for k in range(KEYS) for n in range(1, RECORDS // KEYS + 1))

    seed = crash_seed()
    work = tmp_path / "work"

    def committed_output_only_once():  # read_committed sees at most the committed epochs' output, never twice
        seen = Counter(read_all(kafka_broker, target, quiet_s=0.5))
        assert all(c == 1 for c in seen.values()), f"seed {seed}: duplicates after a kill"
        assert set(seen) <= set(expected), f"seed {seed}"

    err = run_with_kills(lambda: _run(work, kafka_broker, source, target), work, 3, seed, epochs_between=(1, 2),
                         jitter_s=0.8, wait_s=400, finish_timeout=900, after_kill=committed_output_only_once,
                         max_runs=10)
    assert "resuming job 'kafka-counting' from checkpoint" in err
    out = Counter(read_all(kafka_broker, target))
    assert out == expected, f"seed {seed}: missing {sorted(expected - out)[:5]}, extra {sorted(out - expected)[:5]}"
    # uncommitted (aborted) output exists only if a kill landed inside a publication; either way the
    # read_uncommitted view is a superset of the committed one
    assert Counter(read_all(kafka_broker, target, committed_only=False)) >= out
