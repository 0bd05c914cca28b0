"""Seed 000's outage, replayed: the job falls hours behind, then the autoscaler catches it up.

MediaMath's ad servers kept logging impressions while an S3 outage stopped their Flink job; when S3
came back the job was far behind, and they rescaled it by hand to catch up. Here the same story
runs at demo size, with the autoscaler doing the rescaling while the job keeps running:

* impressions arrive at ``--rate`` per second (seeded: every run sees the same data), each of one of
  ``--campaigns`` campaigns with a spend in cents;
* the job sums spend and impressions per campaign in keyed state (PyFlink's ``KeyedProcessFunction``
  and ``ValueState``); each impression also costs ``--cost-ms`` of waiting, as a lookup in an external
  service would — the kind of work more subtasks do faster even on a small machine;
* for ``--outage`` seconds the source cannot read (the "S3 outage"): impressions pile up;
* the outage ends; the autoscaler (``job.autoscaler.*``, bounds ``--autoscale MIN..MAX``) sees the
  backlog and the busy subtasks, scales up live to catch up, and back down once caught up.

The demo prints the decisions as they happen and, at the end, the lag curve (backlog and parallelism
per second) and checks the books: every impression counted exactly once, and the final count and
spend of every campaign equal to what was generated. It prints OK, or MISMATCH and exits with 1.
``--plot FILE.svg`` draws the lag curve (an SVG written by this script, no plotting library).

Run:  python examples/catch_up_demo.py [--rate 50] [--outage 30] [--after 60] [--autoscale 1..4]
                                       [--fixed N] [--plot docs/images/catch-up.svg]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from keyspan.common import Configuration, JobStatus
from keyspan.connectors.sources import KeyspanSource, SourceReader, split_range
from keyspan.datastream import KeyedProcessFunction, SinkFunction, StreamExecutionEnvironment
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime import options as run_options


def impression(i: int, campaigns: int) -> tuple[int, int]:
    """Impression ``i``: its campaign and spend in cents (a pure function of ``i``: replays are exact)."""
    return i % campaigns, (i * 7919) % 97 + 1


class FeedReader(SourceReader):
    """Impressions arrive at ``rate`` per second from the time written in ``clock`` (the demo
    writes it once the job runs, so a slow Spark start does not count) until the demo stops the job;
    while the ``outage`` file says so (its start time; it lasts ``outage_s``), nothing can be read."""

    bounded = False

    def __init__(self, rate: float, campaigns: int, clock: str, outage: str, outage_s: float):
        self.rate, self.campaigns, self.clock, self.outage, self.outage_s = rate, campaigns, clock, outage, outage_s

    @staticmethod
    def _time(path: str) -> float | None:
        try:
            with open(path) as f:
                return float(f.read())
        except (OSError, ValueError):
            return None

    def arrived(self) -> int:
        t0 = self._time(self.clock)
        return 0 if t0 is None else int((time.time() - t0) * self.rate)

    def end_offset(self):
        return None

    def backlog(self, offset):
        return max(0, self.arrived() - (offset or self.initial_offset())["index"])

    def latest_offset(self, start, max_records):
        began = self._time(self.outage)
        if began is not None and began <= time.time() < began + self.outage_s:
            return {"index": start["index"]}  # S3 is down: nothing can be read
        end = self.arrived() if max_records is None else min(self.arrived(), start["index"] + max_records)
        return {"index": max(start["index"], end)}  # the clock may be set back (see ImpressionFeed.set_clock)

    def partitions(self, start, end, parallelism):
        return split_range(start["index"], end["index"], parallelism)

    def read(self, partition):
        lo, hi = partition
        yield [impression(i, self.campaigns) for i in range(lo, hi)]


class ImpressionFeed(KeyspanSource):
    name = "Impression Feed"
    bounded = False

    def __init__(self, rate: float, campaigns: int, outage_s: float, folder: str):
        self.rate, self.campaigns, self.outage_s = rate, campaigns, outage_s
        self.clock, self.outage = os.path.join(folder, "clock"), os.path.join(folder, "outage")
        os.makedirs(folder, exist_ok=True)
        for path in (self.clock, self.outage):  # the demo's own files, from an earlier run
            if os.path.exists(path):
                os.remove(path)

    def fingerprint(self) -> str:
        return f"impressions:{self.rate}:{self.campaigns}"

    @staticmethod
    def _mark(path: str, at: float | None = None) -> float:
        at = time.time() if at is None else at
        with open(path + ".tmp", "w") as f:
            f.write(repr(at))
        os.replace(path + ".tmp", path)
        return at

    def start_clock(self) -> float:
        """Impressions start arriving now."""
        return self._mark(self.clock)

    def set_clock(self, read: int) -> float:
        """Impressions arrived so far: ``read`` (what the job has read), whatever piled up while Spark
        started its first epoch (slow on a busy machine); returns the new start time."""
        return self._mark(self.clock, time.time() - read / self.rate)

    def start_outage(self) -> float:
        """S3 goes down now, for ``outage_s`` seconds."""
        return self._mark(self.outage)

    def reader(self, storage, uid, name):
        return FeedReader(self.rate, self.campaigns, self.clock, self.outage, self.outage_s)


class CampaignSpend(KeyedProcessFunction):
    """Count and spend per campaign; emits the running totals with every impression."""

    def __init__(self, cost_ms: float):
        self.cost_s = cost_ms / 1000

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", None))
        self.spend = runtime_context.get_state(ValueStateDescriptor("spend", None))

    def process_element(self, value, ctx):
        time.sleep(self.cost_s)  # the lookup every impression needs
        campaign, cents = value
        n = (self.count.value() or 0) + 1
        s = (self.spend.value() or 0) + cents
        self.count.update(n)
        self.spend.update(s)
        yield campaign, n, s


class Books(SinkFunction):
    """Committed output only (a driver sink is delivered after its epoch's checkpoint commits)."""

    def __init__(self):
        self.received = 0
        self.latest: dict[int, tuple[int, int]] = {}

    def invoke(self, value, context):
        campaign, n, s = value
        self.received += 1
        if n > self.latest.get(campaign, (0, 0))[0]:
            self.latest[campaign] = (n, s)


def build_job(env, feed: ImpressionFeed, cost_ms: float) -> Books:
    books = Books()
    env.from_source(feed, source_name="impressions").uid("impressions") \
        .key_by(lambda r: r[0]).process(CampaignSpend(cost_ms)).uid("campaign-spend") \
        .add_sink(books)
    return books


def autoscaler_configuration(low: int, high: int, scaling: bool = True, **settings) -> Configuration:
    """Demo-sized autoscaler settings: decide over 4 s windows, let the job settle 4 s after a
    rescale, catch a backlog up within 10 s, and wait 10 s after a scale-up before scaling down
    (``settings``: other ``job.autoscaler.*`` values, by the key after the prefix)."""
    conf = Configuration()
    for key, value in {"job.autoscaler.enabled": "true", "job.autoscaler.scaling.enabled": str(scaling).lower(),
                       "job.autoscaler.min-parallelism": low, "job.autoscaler.max-parallelism": high,
                       "job.autoscaler.metrics.window": "4 s", "job.autoscaler.stabilization.interval": "4 s",
                       "job.autoscaler.catch-up.duration": "10 s", "job.autoscaler.scale-up.grace-period": "10 s",
                       "job.autoscaler.scale-down.interval": "4 s",
                       **{f"job.autoscaler.{k}": v for k, v in settings.items()}}.items():
        conf.set_string(key, str(value))
    return conf


def run(rate: float, outage: float, after: float, campaigns: int, cost_ms: float, low: int, high: int,
        fixed: int | None = None, lead: float = 5.0, max_per_epoch: int | None = None, job_name="catch-up-demo",
        settings: dict | None = None) -> dict:
    """One run of the scenario: impressions arrive from the job's start; once its first epoch has
    committed (and at least ``lead`` s passed) the source is cut off for ``outage`` s; the job is
    stopped ``after`` s after the outage ended. Returns the books (what the sink received against the
    impressions committed), the lag curve, the decisions and timings. ``fixed``: no rescaling, the job runs at that
    parallelism (the autoscaler only watches)."""
    feed = ImpressionFeed(rate, campaigns, outage, os.path.join(os.path.abspath(run_options.current().workdir),
                                                                f"{job_name}-feed"))
    env = StreamExecutionEnvironment.get_execution_environment(
        autoscaler_configuration(fixed or low, fixed or high, scaling=fixed is None, **(settings or {})))
    env.set_parallelism(fixed or low)
    env.enable_checkpointing(500)
    env.set_max_records_per_epoch(max_per_epoch or int(rate * 10))
    books = build_job(env, feed, cost_ms)
    client = env.execute_async(job_name)
    done = client.get_job_execution_result()

    def wait(condition):
        while not condition():
            if done.done():
                done.result()  # the job failed: raise its error
                raise RuntimeError(f"job '{job_name}' ended early")
            time.sleep(0.1)

    wait(lambda: client.get_job_status().result() == JobStatus.RUNNING)
    t0 = feed.start_clock()
    wait(lambda: books.received > 0 and time.time() >= t0 + lead)  # running, first epoch committed
    t0 = feed.set_clock(books.received)  # the outage, not Spark's start-up, makes the backlog
    outage_at = feed.start_outage() - t0
    lifted = outage_at + outage
    wait(lambda: time.time() >= t0 + lifted + after)
    client.cancel().result()
    result = done.result()
    status = result.metrics.autoscaler or {}
    total = sum(n for n, _ in books.latest.values())  # the impressions committed: 0 .. total-1
    expected: dict[int, tuple[int, int]] = {}
    for i in range(total):
        c, cents = impression(i, campaigns)
        n, s = expected.get(c, (0, 0))
        expected[c] = (n + 1, s + cents)
    curve = [{**p, "t": p["t"] - t0} for p in status.get("curve", [])]
    caught = next((p["t"] for p in curve if p["t"] > lifted and p["backlog"] is not None
                   and p["backlog"] <= rate * 2), None)
    return {"total": total, "received": books.received, "latest": books.latest, "expected": expected,
            "curve": curve, "decisions": [{**d, "at": d["at"] - t0} for d in status.get("decisions", [])],
            "outage": (outage_at, lifted), "lifted_at": lifted, "caught_up_at": caught,
            "catch_up_s": None if caught is None else caught - lifted, "epochs": result.epochs,
            "metrics": result.metrics}


def books_balance(r: dict) -> bool:
    return r["received"] == r["total"] and r["latest"] == r["expected"]


def print_report(r: dict) -> None:
    print("\n  time   backlog  parallelism")
    shown = -1.0
    for p in r["curve"]:
        if p["t"] - shown >= 1.0 or p is r["curve"][-1]:
            bar = "#" * int(40 * (p["backlog"] or 0) / max(1, max(q["backlog"] or 0 for q in r["curve"])))
            print(f"{p['t']:6.1f}s {p['backlog'] if p['backlog'] is not None else '-':>8}  {p['parallelism']:>3}  {bar}")
            shown = p["t"]
    print("\ndecisions:")
    for d in r["decisions"]:
        print(f"  at {d['at']:6.1f}s  {d['action']} {d['from']} -> {d['to']}: {d['reason']}")
    if not r["decisions"]:
        print("  none")
    print(f"\nthe outage ended at {r['lifted_at']:.0f}s; "
          + (f"caught up {r['catch_up_s']:.1f}s later" if r["catch_up_s"] is not None else "never caught up"))
    ok = books_balance(r)
    print(f"books: {r['received']:,} impressions delivered, {r['total']:,} committed; per-campaign count and "
          f"spend {'equal' if r['latest'] == r['expected'] else 'DIFFER from'} the generated ones -> "
          f"{'OK' if ok else 'MISMATCH'}")


def write_svg(runs: list[tuple[str, dict]], path: str) -> None:
    """The lag curve of each run (backlog over time) and the autoscaled run's parallelism, as SVG."""
    w, h, pad = 760, 320, 50
    t1 = max(p["t"] for _, r in runs for p in r["curve"]) or 1
    b1 = max((p["backlog"] or 0) for _, r in runs for p in r["curve"]) or 1
    p1 = max(p["parallelism"] for _, r in runs for p in r["curve"]) or 1
    X = lambda t: pad + t / t1 * (w - 2 * pad)  # noqa: E731
    Y = lambda b: h - pad - b / b1 * (h - 2 * pad)  # noqa: E731
    P = lambda n: h - pad - n / p1 * (h - 2 * pad)  # noqa: E731
    colors = ["#c0392b", "#7f8c8d", "#2980b9"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
             f'<rect width="{w}" height="{h}" fill="white"/>',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>',
             f'<text x="{pad}" y="{pad - 8}">backlog (impressions), max {b1:,}</text>',
             f'<text x="{w - pad}" y="{h - pad + 30}" text-anchor="end">seconds since start ({t1:.0f})</text>',
             f'<text x="{w - pad}" y="{pad - 8}" text-anchor="end" fill="#2980b9">parallelism (max {p1})</text>']
    start, lifted = runs[0][1]["outage"]
    parts.append(f'<rect x="{X(start):.1f}" y="{pad}" width="{X(lifted) - X(start):.1f}" height="{h - 2 * pad}" '
                 'fill="#f4e1e1"/>')
    parts.append(f'<text x="{X(start) + 4:.1f}" y="{pad + 14}" fill="#a33">outage</text>')
    for i, (label, r) in enumerate(runs):
        pts = " ".join(f"{X(p['t']):.1f},{Y(p['backlog'] or 0):.1f}" for p in r["curve"])
        parts.append(f'<polyline fill="none" stroke="{colors[i % 2]}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{w - pad - 4}" y="{pad + 16 + 16 * i}" text-anchor="end" fill="{colors[i % 2]}">'
                     f'{label}</text>')
    steps, before = [], None
    for p in runs[0][1]["curve"]:  # the first run's parallelism as a step line
        if before is not None:
            steps.append(f"{X(p['t']):.1f},{P(before):.1f}")
        steps.append(f"{X(p['t']):.1f},{P(p['parallelism']):.1f}")
        before = p["parallelism"]
    parts.append(f'<polyline fill="none" stroke="{colors[2]}" stroke-width="1.5" stroke-dasharray="4 3" '
                 f'points="{" ".join(steps)}"/>')
    parts.append("</svg>")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=50, help="impressions arriving per second")
    ap.add_argument("--outage", type=float, default=30, help="seconds the source cannot read")
    ap.add_argument("--after", type=float, default=90, help="seconds the job keeps running after the outage")
    ap.add_argument("--campaigns", type=int, default=48)
    ap.add_argument("--cost-ms", type=float, default=15.0, help="milliseconds of waiting per impression")
    ap.add_argument("--autoscale", default="1..4", help="the autoscaler's bounds MIN..MAX")
    ap.add_argument("--fixed", type=int, default=None, help="no autoscaling: run at this parallelism")
    ap.add_argument("--plot", default=None, help="write the lag curve to this SVG file")
    args, _ = ap.parse_known_args()
    from keyspan.runtime.autoscaler import parse_bounds

    low, high = parse_bounds(args.autoscale)
    opts = run_options.current()
    # a fresh job every run; a local Spark with a task slot for every subtask the autoscaler may ask for,
    # and up to 3 attempts per task as on a cluster (a busy machine fails a Python worker now and then)
    run_options.install(dataclasses.replace(opts, fresh=True, spark_master=opts.spark_master or f"local[{high},3]"))
    print(f"impressions arrive at {args.rate:g}/s; once the job runs, the source is cut off for {args.outage:g}s "
          f"(the outage); {args.cost_ms:g} ms of work per impression; autoscaler bounds {low}..{high}"
          + (f"; FIXED parallelism {args.fixed}" if args.fixed else ""))
    r = run(args.rate, args.outage, args.after, args.campaigns, args.cost_ms, low, high, fixed=args.fixed)
    print_report(r)
    if args.plot:
        write_svg([("autoscaled" if not args.fixed else f"parallelism {args.fixed}", r)], args.plot)
        print(f"lag curve: {args.plot}")
    sys.exit(0 if books_balance(r) else 1)


if __name__ == "__main__":
    main()
