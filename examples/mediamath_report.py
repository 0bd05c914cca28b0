"""Seed 000's MediaMath job, as a keyspan job: hourly spend per campaign from impression logs that
arrive out of order and hours late.

Twelve hours of impression logs are generated (seeded, so every run sees the same data): each
impression has an id, a campaign, an event timestamp and a spend in cents. Ad servers ship their
logs late: 93 % of impressions arrive within minutes, 5 % 20 minutes to 3 hours late, and 2 % 5 to
7 hours late. The logs are written as one JSON-lines file per hour of *arrival*, and the job reads
one file per epoch, so event time and arrival time really differ.

The job (PyFlink's API, imports from ``keyspan``):

* watermarks: ``WatermarkStrategy.for_bounded_out_of_orderness(10 minutes)`` on the event timestamp;
* windows: ``TumblingEventTimeWindows.of(Time.hours(1))`` per campaign, summed incrementally by an
  ``AggregateFunction``;
* ``allowed_lateness(Time.hours(3))``: an impression arriving after its hour was reported, but less
  than 3 hours after the watermark passed the hour, fires the window again with the updated spend.
  A ``ProcessWindowFunction`` numbers the firings of each window in per-window state, so the sink
  prints "update #2", "update #3", ...;
* ``side_output_late_data(OutputTag("late"))``: impressions later than that go to a side output,
  which the job counts (``get_side_output``) instead of dropping them silently.

Which impressions are late is decided at epoch boundaries (keyspan's watermark model): the
watermark reached after a log file is (largest event time seen so far − 10 min − 1 ms); an
impression of the next file is late data when its hour's last millisecond + 3 h is at or before
that watermark. Impressions whose hour the watermark has passed, but by less than that, update it.

At the end the job checks its own books: for every hour and campaign, the last reported spend plus
the spend of that window's late impressions equals the spend generated, and over all windows
reported spend + late spend == total spend. It prints OK, or MISMATCH and exits with status 1.

Run:  python examples/mediamath_report.py [--impressions 12000] [--campaigns 12] [--hours 12]
                                          [--show CAMPAIGN | --show all]
      (or: keyspan run examples/mediamath_report.py; sizes also via MEDIAMATH_IMPRESSIONS, ...)
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import os
import random
import sys
from collections import defaultdict
from datetime import datetime, timezone

from keyspan.common import Duration, Time, WatermarkStrategy
from keyspan.datastream import (
    AggregateFunction,
    OutputTag,
    ProcessWindowFunction,
    SinkFunction,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
)
from keyspan.datastream.connectors.file_system import FileSource, StreamFormat
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime import options as run_options

DEMO_DIR = os.path.abspath(os.environ.get("KEYSPAN_DEMO_DIR", os.path.join(".keyspan", "demo")))
INPUT_DIR = os.path.join(DEMO_DIR, "impressions")

DAY_START = int(datetime(2026, 11, 20, tzinfo=timezone.utc).timestamp() * 1000)
HOUR = 3_600_000
MINUTE = 60_000
BOUND = Duration.of_minutes(10)       # out-of-orderness the watermark waits for
LATENESS = Time.hours(3)              # how long an hour's window accepts updates after it fired


def hour_label(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M")


def dollars(cents: int) -> str:
    return f"{cents // 100:,}.{cents % 100:02d}"


# --- the data ----------------------------------------------------------------------------------------

def generate_logs(directory: str, impressions: int, campaigns: int, hours: int, seed: int = 0) -> dict:
    """Impression logs, one JSON-lines file per hour of arrival (``arrivals-HHHH.jsonl``).

    Delay between an impression and its arrival: 90 % within 8 minutes (inside the watermark's
    bound), 5 % 20 min – 3 h (after the hour was reported, within the allowed lateness: updates),
    2 % 5 – 7 h (beyond the allowed lateness: the late-data side output). Returns the totals."""
    rng = random.Random(seed)
    weights = [1 / (c + 1) for c in range(campaigns)]           # a few big campaigns, many small ones
    records = []
    for i in range(impressions):
        ts = DAY_START + rng.randrange(hours * HOUR)
        r = rng.random()
        if r < 0.93:
            delay = rng.randrange(8 * MINUTE)
        elif r < 0.98:
            delay = rng.randrange(20 * MINUTE, 3 * HOUR)
        else:
            delay = rng.randrange(5 * HOUR, 7 * HOUR)
        campaign = rng.choices(range(1, campaigns + 1), weights)[0]
        records.append((ts + delay, {"id": i, "campaign": campaign, "ts": ts, "spend": rng.randint(5, 250)}))
    records.sort(key=lambda r: r[0])
    for old in glob.glob(os.path.join(directory, "*.jsonl")):
        os.remove(old)
    os.makedirs(directory, exist_ok=True)
    by_file = defaultdict(list)
    for arrival, record in records:
        by_file[(arrival - DAY_START) // HOUR].append(record)
    for n, rows in sorted(by_file.items()):
        with open(os.path.join(directory, f"arrivals-{n:04d}.jsonl"), "w") as out:
            out.write("".join(json.dumps(r) + "\n" for r in rows))
    return {"impressions": impressions, "files": len(by_file), "spend": sum(r["spend"] for _, r in records),
            "records": [r for _, r in records]}


# --- the job ------------------------------------------------------------------------------------------

class SpendAndCount(AggregateFunction):
    """Incremental (spend in cents, impressions) of one campaign-hour."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return accumulator[0] + value.spend, accumulator[1] + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, acc_a, acc_b):
        return acc_a[0] + acc_b[0], acc_a[1] + acc_b[1]


class HourlyReport(ProcessWindowFunction):
    """Emits (campaign, hour start, spend, impressions, firing number, watermark) per firing; the
    firing number lives in per-window state, cleared when the window expires."""

    firings = ValueStateDescriptor("firings")

    def process(self, key, context, elements):
        spend, count = next(iter(elements))
        state = context.window_state().get_state(self.firings)
        n = (state.value() or 0) + 1
        state.update(n)
        yield key, context.window().start, spend, count, n, context.current_watermark()

    def clear(self, context):
        context.window_state().get_state(self.firings).clear()


class ReportSink(SinkFunction):
    """The billing report: runs on the driver, for each firing of a committed epoch."""

    def __init__(self, show):
        self.show = show          # a campaign id, "all", or None
        self.final = {}           # (campaign, hour) -> (spend, impressions, firings)
        self.firings = 0

    def invoke(self, value, context):
        campaign, start, spend, count, n, watermark = value
        self.firings += 1
        if n > self.final.get((campaign, start), (0, 0, 0))[2]:   # a window's latest firing
            self.final[(campaign, start)] = (spend, count, n)
        if self.show == "all" or self.show == campaign:
            what = "first report" if n == 1 else f"update #{n}"
            wm = "end of input" if watermark >= (1 << 62) else hour_label(watermark) + f":{watermark // 1000 % 60:02d}"
            print(f"campaign {campaign:>2} hour {hour_label(start)} spend {dollars(spend):>9} "
                  f"({count:>4} impressions, {what}; watermark {wm})", flush=True)


class LateSink(SinkFunction):
    def __init__(self):
        self.records = []

    def invoke(self, value, context):
        self.records.append(value)


def build_job(env, show):
    source = (FileSource.for_record_stream_format(StreamFormat.json_lines_format(), INPUT_DIR)
              .set_max_files_per_epoch(1).build())          # one hour of arrivals per epoch
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(BOUND) \
        .with_timestamp_assigner(lambda impression, _: impression.ts)
    late = OutputTag("late")
    hourly = (env.from_source(source, strategy, "impression logs").uid("impression-logs")
              .key_by(lambda impression: impression.campaign)
              .window(TumblingEventTimeWindows.of(Time.hours(1)))
              .allowed_lateness(LATENESS)
              .side_output_late_data(late)
              .aggregate(SpendAndCount(), HourlyReport())
              .uid("hourly-spend").name("hourly spend per campaign"))
    report, late_sink = ReportSink(show), LateSink()
    hourly.add_sink(report).uid("report")
    hourly.get_side_output(late).add_sink(late_sink).uid("late-impressions")
    return report, late_sink


def check(report: ReportSink, late: LateSink, data: dict) -> bool:
    """Per window: last reported spend + spend of its late impressions == spend generated for it;
    and the same over everything."""
    generated = defaultdict(int)
    for r in data["records"]:
        generated[(r["campaign"], r["ts"] - (r["ts"] - DAY_START) % HOUR)] += r["spend"]
    late_by_window = defaultdict(int)
    for r in late.records:
        late_by_window[(r.campaign, r.ts - (r.ts - DAY_START) % HOUR)] += r.spend
    bad = [w for w in generated
           if report.final.get(w, (0, 0, 0))[0] + late_by_window.get(w, 0) != generated[w]]
    bad += [w for w in report.final if w not in generated]
    reported = sum(spend for spend, _, _ in report.final.values())
    late_spend = sum(late_by_window.values())
    ok = not bad and reported + late_spend == data["spend"] and len({r.id for r in late.records}) == len(late.records)
    print(f"check: reported {dollars(reported)} + late {dollars(late_spend)} = {dollars(reported + late_spend)}"
          f"  vs generated {dollars(data['spend'])}  ->  {'OK' if ok else 'MISMATCH'}")
    for w in bad[:10]:
        print(f"  window campaign {w[0]} hour {hour_label(w[1])}: reported "
              f"{report.final.get(w, (0,))[0]} + late {late_by_window.get(w, 0)} != generated {generated.get(w)}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impressions", type=int, default=int(os.environ.get("MEDIAMATH_IMPRESSIONS", 12_000)))
    ap.add_argument("--campaigns", type=int, default=int(os.environ.get("MEDIAMATH_CAMPAIGNS", 12)))
    ap.add_argument("--hours", type=int, default=int(os.environ.get("MEDIAMATH_HOURS", 12)))
    ap.add_argument("--seed", type=int, default=int(os.environ.get("MEDIAMATH_SEED", 0)))
    ap.add_argument("--show", default=os.environ.get("MEDIAMATH_SHOW", "7"),
                    help="campaign whose every firing is printed, 'all', or 'none'")
    args, _ = ap.parse_known_args()  # under `keyspan run`, sys.argv holds the CLI's own arguments
    show = None if args.show == "none" else "all" if args.show == "all" else int(args.show)

    data = generate_logs(INPUT_DIR, args.impressions, args.campaigns, args.hours, args.seed)
    print(f"generated {data['impressions']:,} impressions of {args.campaigns} campaigns over {args.hours} h, "
          f"spend {dollars(data['spend'])}, in {data['files']} hourly arrival files ({INPUT_DIR})")
    if show not in (None, "all"):
        print(f"every report of campaign {show} (--show N|all|none):")
    # the logs were just regenerated: the job starts from scratch rather than resuming an old run
    run_options.install(dataclasses.replace(run_options.current(), fresh=True))
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    report, late = build_job(env, show)
    result = env.execute("mediamath-report")

    updates = sum(n - 1 for _, _, n in report.final.values())
    updated_windows = sum(1 for _, _, n in report.final.values() if n > 1)
    late_spend = sum(r.spend for r in late.records)
    print(f"\nprocessed {result.records:,} impressions in {result.epochs} epochs (one arrival file each)")
    print(f"windows reported: {len(report.final)}  firings: {report.firings}  "
          f"updates: {updates} (in {updated_windows} windows)")
    print(f"late impressions (side output 'late'): {len(late.records)}, spend {dollars(late_spend)}")
    ok = check(report, late, data)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
