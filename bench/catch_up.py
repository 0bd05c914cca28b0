"""Time to catch up after an outage: the autoscaler against fixed parallelism.

    python bench/catch_up.py [--rate 50] [--outage 30] [--after 60] [--cost-ms 10] [--autoscale 1..4]
                             [--fixed 1 4] [--plot docs/images/catch-up.svg]

Runs seed 000's scenario (examples/catch_up_demo.py) once with the autoscaler and once per fixed
parallelism, in one Spark session: impressions arrive at ``--rate``/s, the source is cut off for
``--outage`` s, then reads again. Printed per run: the largest backlog, the time from the end of the
outage until the backlog is down to two seconds of input ("caught up"), the parallelism used
(min/max, and subtask-seconds spent: parallelism integrated over the run), epochs, and whether the
books balance (every impression exactly once). ``--plot`` writes the lag curves as one SVG.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from keyspan.runtime import options as run_options  # noqa: E402
from keyspan.runtime.autoscaler import parse_bounds  # noqa: E402


def _demo():
    spec = importlib.util.spec_from_file_location("catch_up_demo", os.path.join(ROOT, "examples", "catch_up_demo.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["catch_up_demo"] = module  # cloudpickle ships registered modules by value
    spec.loader.exec_module(module)
    import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module


def subtask_seconds(curve: list[dict]) -> float:
    return sum((b["t"] - a["t"]) * a["parallelism"] for a, b in zip(curve, curve[1:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=50)
    ap.add_argument("--outage", type=float, default=30)
    ap.add_argument("--after", type=float, default=60)
    ap.add_argument("--cost-ms", type=float, default=15.0)
    ap.add_argument("--campaigns", type=int, default=48)
    ap.add_argument("--autoscale", default="1..4")
    ap.add_argument("--fixed", type=int, nargs="*", default=[1])
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    demo = _demo()
    low, high = parse_bounds(args.autoscale)
    workdir = tempfile.mkdtemp(prefix="keyspan-catch-up-")
    run_options.install(dataclasses.replace(run_options.RunOptions(workdir=workdir), fresh=True, progress=False,
                                            spark_master=f"local[{max([high, *args.fixed])},3]", spark_ui=False))
    runs = []
    for label, fixed in [(f"autoscaled {low}..{high}", None)] + [(f"fixed parallelism {p}", p) for p in args.fixed]:
        r = demo.run(args.rate, args.outage, args.after, args.campaigns, args.cost_ms, low, high, fixed=fixed,
                     job_name=f"catch-up-{'auto' if fixed is None else fixed}")
        runs.append((label, r))
        ps = [p["parallelism"] for p in r["curve"]]
        peak = max((p["backlog"] or 0) for p in r["curve"])
        caught = f"{r['catch_up_s']:.1f} s" if r["catch_up_s"] is not None else "not within the run"
        print(f"{label:<24} peak backlog {peak:>6,}  caught up after {caught:>18}  parallelism {min(ps)}..{max(ps)}  "
              f"subtask-seconds {subtask_seconds(r['curve']):7.1f}  epochs {r['epochs']:>4}  rescales "
              f"{len(r['decisions'])}  books {'OK' if demo.books_balance(r) else 'MISMATCH'}", flush=True)
    if args.plot:
        demo.write_svg(runs, args.plot)
        print(f"lag curves: {args.plot}")


if __name__ == "__main__":
    main()
