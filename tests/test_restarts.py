"""Restart strategies (PyFlink's ``RestartStrategies``): a failed run restarts in the same driver from
its latest checkpoint, as often as the strategy allows, and the output equals a failure-free run."""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from pathlib import Path

import pytest

from keyspan.common import Encoder
from keyspan.common.restart_strategy import RestartStrategies
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime.executor import JobExecutionError

from savepoint_helpers import store, use_options


def test_strategies_keep_pyflink_names_and_values():
    fixed = RestartStrategies.fixed_delay_restart(3, timedelta(seconds=2))
    assert fixed.get_restart_attempts() == 3
    assert fixed.get_delay_between_attempts_interval() == timedelta(seconds=2)
    assert fixed == RestartStrategies.fixed_delay_restart(3, 2000)
    rate = RestartStrategies.failure_rate_restart(2, timedelta(minutes=1), 500)
    assert (rate.get_max_failure_rate(), rate.get_failure_interval(), rate.get_delay_between_attempts_interval()) \
        == (2, timedelta(minutes=1), timedelta(milliseconds=500))
    exp = RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 5000, 0.0)
    assert exp.get_initial_backoff() == timedelta(milliseconds=100) and exp.get_backoff_multiplier() == 2.0
    assert RestartStrategies.no_restart().get_description() == "Restart deactivated."
    with pytest.raises(TypeError):
        RestartStrategies.fixed_delay_restart(1, "soon")
    env = StreamExecutionEnvironment.get_execution_environment()
    assert isinstance(env.get_restart_strategy(), RestartStrategies.FallbackRestartStrategyConfiguration)
    env.set_restart_strategy(fixed)
    assert env.get_restart_strategy() is fixed


def test_strategy_decisions():
    fixed = RestartStrategies.fixed_delay_restart(2, 50).new_tracker()
    assert [fixed.on_failure(t) for t in (0, 1, 2)] == [50, 50, None]

    rate = RestartStrategies.failure_rate_restart(2, 1000, 10).new_tracker()
    # the second failure within a second fails the job; failures far apart never do
    assert [rate.on_failure(t) for t in (0, 5000, 10000, 10500)] == [10, 10, 10, None]

    exp = RestartStrategies.exponential_delay_restart(100, 1000, 2.0, 5000, 0.0).new_tracker()
    assert [exp.on_failure(t) for t in (0, 10, 20, 30, 40, 50)] == [100, 200, 400, 800, 1000, 1000]
    assert exp.on_failure(60_000) == 100  # quiet for longer than the reset threshold: back to the start


class FailsOnce(KeyedProcessFunction):
    """Counts per key; the first attempt that reaches record 300 fails once (a marker file remembers
    it across the Python workers and the restart)."""

    def __init__(self, marker: str, failures: int = 1):
        self.marker = marker
        self.failures = failures

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        if value[1] == 300:
            done = len(os.listdir(self.marker))
            if done < self.failures:
                open(os.path.join(self.marker, str(done)), "w").close()
                raise RuntimeError("injected failure at record 300")
        yield f"{ctx.get_current_key()},{n}"


def _task_attempts() -> int:
    """Attempts Spark gives a task (``local[N,F]``: F) before the run fails: a run fails only when
    every attempt of the task does."""
    from pyspark.sql import SparkSession

    master = SparkSession.getActiveSession().sparkContext.master
    parts = master[master.index("[") + 1:-1].split(",") if master.startswith("local[") else []
    return int(parts[1]) if len(parts) == 2 else 1


def _build(env, out: Path, marker: Path, failures: int):
    marker.mkdir(exist_ok=True)
    env.set_parallelism(2)
    env.set_max_records_per_epoch(100)
    data = [(f"k{i % 7}", i) for i in range(600)]
    (env.from_collection(data).uid("src").key_by(lambda r: r[0])
        .process(FailsOnce(str(marker), failures)).uid("count")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink"))


def _expected() -> list[str]:
    counts: dict = {}
    lines = []
    for i in range(600):
        k = f"k{i % 7}"
        counts[k] = counts.get(k, 0) + 1
        lines.append(f"{k},{counts[k]}")
    return sorted(lines)


def _lines(out: Path) -> list[str]:
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def test_fixed_delay_restart_resumes_from_latest_checkpoint(env, workdir, caplog):
    # two runs fail here: every attempt Spark gives the task fails, twice over
    out, marker = workdir / "out", workdir / "marker"
    attempts = _task_attempts()
    _build(env, out, marker, failures=2 * attempts)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    with caplog.at_level(logging.WARNING, logger="keyspan.runtime"):
        env.execute("restarted")
    assert _lines(out) == _expected()
    runs = store().list_runs("restarted")
    assert [r["status"] for r in runs] == ["FINISHED"]  # the same run resumed: Spark replayed the failed epoch
    assert "restart 1 from its latest checkpoint" in caplog.text
    assert "restart 2 from its latest checkpoint" in caplog.text
    assert len(os.listdir(marker)) == 2 * attempts


def test_no_restart_fails_and_cli_attempts_restart(workdir):
    out, marker = workdir / "out", workdir / "marker"
    attempts = _task_attempts()
    env = StreamExecutionEnvironment.get_execution_environment()
    _build(env, out, marker, failures=attempts)
    with pytest.raises(JobExecutionError, match="injected failure"):
        env.execute("no-restart")
    assert store().latest_run("no-restart")["status"] == "FAILED"
    committed = store().latest_checkpoint("no-restart")["epoch"]

    # `keyspan run --restart-attempts 1` is the fall-back strategy: the next run fails once more and restarts
    use_options(restart_attempts=1, restart_delay_s=0.0)
    env = StreamExecutionEnvironment.get_execution_environment()
    _build(env, out, marker, failures=2 * attempts)
    env.execute("no-restart")
    assert _lines(out) == _expected()
    first_new = min(c["epoch"] for c in store().list_checkpoints("no-restart") if c["epoch"] > committed)
    assert first_new == committed + 1  # continued after the checkpoint the failed run left
