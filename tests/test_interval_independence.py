"""Event-time results are a function of the data, not of the epochs (seed 003's critique of
micro-batch systems, issue 5).

Hypothesis draws out-of-order input whose disorder stays within the watermark bound (plus the
allowed lateness) and cuts it into epochs of random size; window results and timer firings must
equal a plain-Python reference model every time. A second test feeds the same files to an
unbounded job at trigger intervals of 100 ms, 1 s and 10 s.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keyspan.common import Duration, Time, WatermarkStrategy
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.state import MapStateDescriptor

WINDOW = 100   # ms, tumbling
BOUND = 50     # ms, watermark bound
LATENESS = 70  # ms, allowed lateness of the windowed job


@st.composite
def disordered(draw, max_disorder: int):
    """(key, event time, value) whose timestamps trail the running maximum by at most max_disorder."""
    n = draw(st.integers(1, 24))
    steps = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    jitter = draw(st.lists(st.integers(0, max_disorder), min_size=n, max_size=n))
    keys = draw(st.lists(st.sampled_from("abc"), min_size=n, max_size=n))
    out, clock = [], 1000
    for i in range(n):
        clock += steps[i]
        out.append((keys[i], clock - jitter[i], i + 1))
    return out


def reference_sums(data) -> dict:
    sums = defaultdict(int)
    for key, ts, value in data:
        sums[(key, ts - ts % WINDOW)] += value
    return dict(sums)


def strategy():
    return WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND)).with_timestamp_assigner(
        lambda value, _: value[1])


class TimerWindows(KeyedProcessFunction):
    """Tumbling sums built from keyed state and event-time timers only."""

    def open(self, runtime_context):
        self.sums = runtime_context.get_map_state(MapStateDescriptor("sums"))

    def process_element(self, value, ctx):
        start = ctx.timestamp() - ctx.timestamp() % WINDOW
        self.sums.put(start, (self.sums.get(start) or 0) + value[2])
        ctx.timer_service().register_event_time_timer(start + WINDOW - 1)

    def on_timer(self, timestamp, ctx):
        start = timestamp + 1 - WINDOW
        yield ctx.get_current_key(), start, self.sums.get(start)
        self.sums.remove(start)


def _windowed(ds, lateness: int):
    from keyspan.datastream.functions import ProcessWindowFunction
    from keyspan.datastream.window import TumblingEventTimeWindows

    class Sum(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield key, context.window().start, sum(e[2] for e in elements)

    return ds.key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW))) \
        .allowed_lateness(lateness).process(Sum())


# each example runs its own (fresh) job in the test's workdir
EXAMPLES = settings(max_examples=6, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh_env(cut: int):
    env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
    return env.set_max_records_per_epoch(cut)


@EXAMPLES
@given(data=disordered(BOUND), cut=st.integers(1, 12))
def test_timer_firings_do_not_depend_on_epoch_cuts(workdir, data, cut):
    env = fresh_env(cut)
    out = env.from_collection(data).assign_timestamps_and_watermarks(strategy()).key_by(lambda r: r[0]) \
        .process(TimerWindows()).execute_and_collect()
    fired = list(out)
    assert sorted(fired) == sorted((k, s, v) for (k, s), v in reference_sums(data).items())


@EXAMPLES
@given(data=disordered(BOUND + LATENESS), cut=st.integers(1, 12))
def test_window_results_do_not_depend_on_epoch_cuts(workdir, data, cut):
    """Disorder up to bound + allowed lateness: no record is dropped; a window may fire early and be
    updated by late firings, and its last result is the reference sum."""
    env = fresh_env(cut)
    out = list(_windowed(env.from_collection(data).assign_timestamps_and_watermarks(strategy()), LATENESS)
               .execute_and_collect())
    last = {}
    for key, start, total in out:
        last[(key, start)] = total
    assert last == reference_sums(data)
    in_bound = all(ts >= max((t for _, t, _ in data[:i]), default=ts) - BOUND for i, (_, ts, _) in enumerate(data))
    if in_bound:  # disorder within the bound: each window fires exactly once
        assert len(out) == len(last)


def test_window_results_do_not_depend_on_the_trigger_interval(workdir):
    """Files arrive over time; at 100 ms each file is an epoch of its own, at 10 s the whole input is
    one or two epochs. The results must be identical and equal to the reference."""
    from keyspan.datastream import SinkFunction, StreamExecutionEnvironment
    from keyspan.datastream.connectors.file_system import FileSource, StreamFormat
    from savepoint_helpers import BackgroundJob, stop_with_savepoint, use_options, wait_for_checkpoints

    data = [(k, 1000 + 37 * i - (i * 7919) % BOUND, i) for i, k in enumerate("abcab" * 8)]
    expected = reference_sums(data)
    results, epochs = {}, {}
    for interval in (100, 1000, 10_000):
        folder = workdir / f"in-{interval}"
        folder.mkdir()
        got = []

        class Collect(SinkFunction):
            def invoke(self, value, context):
                got.append(value)

        use_options()
        env = StreamExecutionEnvironment.get_execution_environment().set_parallelism(2)
        env.enable_checkpointing(interval)
        source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)) \
            .monitor_continuously().build()
        strategy_ = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND)) \
            .with_timestamp_assigner(lambda value, _: value.ts)
        ds = env.from_source(source, strategy_, "files").map(lambda r: (r.key, r.ts, r.value))
        _windowed(ds, 0).add_sink(Collect())
        job_name = f"interval-{interval}"

        def write(part):
            rows = data[part:part + 8] + ([("z", 10**9, 0)] if part + 8 >= len(data) else [])
            tmp = folder / f".part-{part:03d}"
            tmp.write_text("".join(f'{{"key": "{k}", "ts": {t}, "value": {v}}}\n' for k, t, v in rows))
            tmp.rename(folder / f"part-{part:03d}.jsonl")

        def feed():
            for part in range(8, len(data), 8):
                time.sleep(0.3)
                write(part)

        write(0)
        job = BackgroundJob(env, job_name)
        wait_for_checkpoints(job_name, 1, job=job)  # the job runs: the rest arrives while it does
        writer = threading.Thread(target=feed)
        writer.start()
        deadline = time.time() + 120
        while len(got) < len(expected) and time.time() < deadline and job.thread.is_alive():
            time.sleep(0.2)
        writer.join()
        stop_with_savepoint(job_name)
        epochs[interval] = job.join().epochs
        results[interval] = sorted(got)
    assert epochs[100] > epochs[10_000], epochs  # the input really was cut differently
    assert results[100] == results[1000] == results[10_000] == sorted((k, s, v) for (k, s), v in expected.items())
