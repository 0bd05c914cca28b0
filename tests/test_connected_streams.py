"""Two-input operators (``ds1.connect(ds2)``): CoMap/CoFlatMap on plain streams, a keyed
``KeyedCoProcessFunction`` join with state shared by both inputs, event-time timers and a side
output, whose watermark is the minimum of its inputs'; its state survives a savepoint restored at
other parallelisms and SIGKILLs of the whole driver, with output identical to a clean run.

Expected outputs follow PyFlink's documented semantics: ``map1``/``flat_map1`` see the first
stream, ``map2``/``flat_map2`` the second; a co-map's None result is dropped; an event-time timer
fires once the operator's watermark (the minimum over both inputs) reaches it, and every timer
fires at the end of a bounded input."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from keyspan.common import Duration, WatermarkStrategy
from keyspan.common.watermark_strategy import TimestampAssigner
from keyspan.datastream import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    ConnectedStreams,
    KeyedCoProcessFunction,
    OutputTag,
    SinkFunction,
    StreamExecutionEnvironment,
)
from keyspan.datastream.state import ListStateDescriptor, MapStateDescriptor

from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options, wait_for_checkpoints
from job_processes import crash_seed, run_here, run_with_kills, start_job
from test_exactly_once import _output

JOB = Path(__file__).parent / "jobs" / "connected_job.py"
_spec = importlib.util.spec_from_file_location("connected_job", JOB)
connected_job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(connected_job)


class Tag(CoMapFunction):
    def map1(self, value):
        return ("int", value * 10)

    def map2(self, value):
        return None if value == "drop" else ("str", len(value))


class Explode(CoFlatMapFunction):
    def flat_map1(self, value):
        yield from [value] * value

    def flat_map2(self, value):
        yield from value


def test_co_map_and_co_flat_map_route_each_input_to_its_method(env):
    ints = list(range(1, 9))
    words = ["a", "bb", "drop", "cccc"]
    mapped = env.from_collection(ints).connect(env.from_collection(words)).map(Tag()).execute_and_collect()
    assert Counter(mapped) == Counter([("int", i * 10) for i in ints] + [("str", 1), ("str", 2), ("str", 4)])

    env2 = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    connected = env2.from_collection([1, 2, 3]).connect(env2.from_collection(["xy", "z"]))
    assert isinstance(connected, ConnectedStreams)
    flat = connected.flat_map(Explode()).execute_and_collect()
    assert Counter(flat) == Counter([1, 2, 2, 3, 3, 3, "x", "y", "z"])


def test_connect_checks_functions_like_pyflink(env):
    a, b = env.from_collection([1]), env.from_collection([2])
    with pytest.raises(TypeError, match="CoMapFunction"):
        a.connect(b).map(lambda v: v)
    with pytest.raises(TypeError, match="key_by"):
        a.connect(b).process(connected_job.Tally())


class CountPerSide(CoProcessFunction):
    """A non-keyed CoProcessFunction sees each record's timestamp and the clocks in its context."""

    def process_element1(self, value, ctx):
        yield "left", value, ctx.timestamp(), ctx.timer_service().current_watermark() is not None

    def process_element2(self, value, ctx):
        yield "right", value, ctx.timestamp(), True


class At(TimestampAssigner):
    def __init__(self, field):
        self.field = field

    def extract_timestamp(self, value, record_timestamp):
        return value[self.field]


def test_co_process_function_gets_timestamps(env):
    left = env.from_collection([(i, i * 10) for i in range(4)]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(At(1)))
    right = env.from_collection(["r"])
    out = left.connect(right).process(CountPerSide()).execute_and_collect()
    assert sorted(out, key=repr) == sorted([("left", (i, i * 10), i * 10, True) for i in range(4)]
                                           + [("right", "r", -2 ** 63, True)], key=repr)


UNMATCHED = OutputTag("unmatched")


class EnrichWithProfile(KeyedCoProcessFunction):
    """Event-time join: a transaction waits (in state, with a timer at its timestamp) until the
    watermark passes it, then takes the customer's latest profile version not newer than it."""

    def open(self, runtime_context):
        self.versions = runtime_context.get_map_state(MapStateDescriptor("versions"))
        self.pending = runtime_context.get_list_state(ListStateDescriptor("pending"))

    def process_element1(self, tx, ctx):
        assert ctx.get_current_key() == tx[1]
        self.pending.add(tx)
        ctx.timer_service().register_event_time_timer(tx[3])

    def process_element2(self, profile, ctx):
        self.versions.put(profile[1], profile[2])

    def on_timer(self, timestamp, ctx):
        due = [tx for tx in self.pending.get() if tx[3] <= timestamp]
        self.pending.update([tx for tx in self.pending.get() if tx[3] > timestamp])
        known = [ts for ts in self.versions.keys() if ts <= timestamp]
        for tx in due:
            if known:
                yield tx[0], ctx.get_current_key(), tx[2], self.versions.get(max(known)), ctx.timestamp()
            else:
                yield UNMATCHED, tx[0]


def _enrichment_data():
    customers = [f"c{i}" for i in range(6)]
    # profiles are dense in event time, transactions sparse: per epoch the profile input's event time
    # advances a third as fast, so its watermark is the operator's (the minimum over both inputs)
    profiles = [(customers[c], ts, f"{customers[c]}@v{ts}") for ts in range(0, 3000, 100) for c in range(5)]
    txs = [(f"tx{i}", customers[i % 6], i, i * 50 + 25) for i in range(60)]
    expected = []
    for tx_id, customer, amount, ts in txs:
        versions = [p for p in profiles if p[0] == customer and p[1] <= ts]
        if versions:
            expected.append((tx_id, customer, amount, max(versions, key=lambda p: p[1])[2], ts))
    unmatched = [tx[0] for tx in txs if tx[1] == "c5"]
    return profiles, txs, expected, unmatched


def test_keyed_co_process_join_with_shared_state_timers_and_min_watermark(env, workdir):
    profiles, txs, expected, unmatched = _enrichment_data()
    env.set_max_records_per_epoch(12)
    tx_stream = env.from_collection(txs).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(At(3)))
    profile_stream = env.from_collection(profiles).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(At(1)))
    joined = (tx_stream.connect(profile_stream).key_by(lambda t: t[1], lambda p: p[0])
              .process(EnrichWithProfile()).uid("enrich"))
    side = joined.get_side_output(UNMATCHED)
    result, collected = [], []
    joined.add_sink(_Collect(result))
    side.map(lambda tx_id: ("unmatched", tx_id)).add_sink(_Collect(collected))
    env.execute("enrich")
    assert sorted(result) == sorted(expected)
    assert len(expected) == 50 and sorted(t for _, t in collected) == sorted(unmatched)


class _Collect(SinkFunction):
    """A sink function runs on the driver: records land in the test's list."""

    def __init__(self, into: list):
        self.into = into

    def invoke(self, value, context):
        self.into.append(value)


RECORDS = 720  # 24 epochs of 30 orders: each of the two runs below stops with epochs to spare


def _lines(out: Path) -> list[str]:
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


def _env(parallelism: int) -> StreamExecutionEnvironment:
    return StreamExecutionEnvironment.get_execution_environment().set_parallelism(parallelism)


@pytest.mark.timeout(1500)
def test_connected_keyed_state_survives_savepoint_restored_at_other_parallelisms(workdir):
    reference_out = workdir / "reference"
    env = _env(2)
    connected_job.build(env, str(reference_out), records=RECORDS)
    env.execute("reference")
    reference = _lines(reference_out)
    totals = [json.loads(line) for line in reference if '"total"' in line]
    assert len(totals) == 12 and sum(t[2] for t in totals) == RECORDS and sum(t[3] for t in totals) == RECORDS // 2

    out = workdir / "out"
    path = None
    for parallelism in (2, 3):
        use_options(savepoint_path=path)
        env = _env(parallelism)
        connected_job.build(env, str(out), records=RECORDS)
        job = BackgroundJob(env, "connected")
        wait_for_checkpoints("connected", 3, job=job)
        path = stop_with_savepoint("connected")
        job.join()
        assert _lines(out) != reference  # stopped before the end
    use_options(savepoint_path=path)
    env = _env(1)
    connected_job.build(env, str(out), records=RECORDS)
    env.execute("connected")
    assert _lines(out) == reference


def _run_connected(workdir: Path, output: Path):
    return start_job(JOB, workdir, {"CONNECTED_JOB_OUTPUT": str(output)})


@pytest.mark.timeout(1500)
def test_sigkill_of_a_connected_job_gives_the_clean_run_output(tmp_path, spark):
    clean_out = tmp_path / "clean-out"
    run_here(JOB, tmp_path / "clean", {"CONNECTED_JOB_OUTPUT": str(clean_out)})
    reference = _output(clean_out)
    assert len(reference) >= 6

    seed = crash_seed()
    work, out = tmp_path / "crashy", tmp_path / "crashy-out"
    run_with_kills(lambda: _run_connected(work, out), work, 2, seed, jitter_s=0.5, max_runs=8)
    assert _output(out) == reference, f"seed {seed}"
