"""Watermarks at epoch boundaries: one function, run by tasks and by the driver on the same inputs.

Every source and every ``assign_timestamps_and_watermarks`` operator is a watermark *origin*. Its
tasks report, per split, the largest event timestamp of the epoch's records. After epoch e the
origin's watermark is ``max(previous, min over live splits of (max timestamp − bound − 1))``, or
Long.MAX once all its input is read. An operator's watermark is the minimum over the origins
upstream of it. Records of epoch e+1 are judged late against the watermark reached after epoch e,
and event-time timers up to it fire at the end of epoch e; so results depend on the data, not on
where epochs cut it, as long as disorder stays within the bound (docs/event-time.md).
"""

from __future__ import annotations

from keyspan.common.clock import LONG_MAX, LONG_MIN  # noqa: F401 — the range watermarks live in


def advance(origins: dict[str, dict], state: dict, reports: dict[str, dict], now: int, finished) -> dict:
    """The origins' time state after an epoch. ``state``: uid → {"wm", "splits": {split: [max ts,
    last active ms]}, "since"}; ``reports``: uid → {split: max ts of this epoch's records};
    ``finished``: uids of origins whose whole input has been read by the end of this epoch."""
    new = {}
    for uid, spec in origins.items():
        prev = state.get(uid) or {"wm": LONG_MIN, "splits": {}, "since": now}
        splits = {k: list(v) for k, v in prev["splits"].items()}
        for split, max_ts in reports.get(uid, {}).items():
            old = splits.get(split)
            splits[split] = [max(old[0], max_ts) if old else max_ts, now]
        watermark = prev["wm"]
        if uid in finished:
            watermark = LONG_MAX
        elif spec["bound_ms"] is not None:
            idle = spec["idleness_ms"]
            live = []
            for i in range(spec["splits"]):
                split = splits.get(str(i))
                last_active = split[1] if split else prev["since"]
                if idle and now - last_active >= idle:
                    continue  # an idle split does not hold the watermark back
                live.append(split[0] if split else LONG_MIN)
            if live and min(live) > LONG_MIN:
                watermark = max(watermark, min(live) - spec["bound_ms"] - 1)
        new[uid] = {"wm": watermark, "splits": splits, "since": prev["since"]}
    return new


def watermark_of(state: dict, origin_uids) -> int:
    """An operator's watermark: the minimum over the origins upstream of it."""
    marks = [state[u]["wm"] if u in state else LONG_MIN for u in origin_uids]
    return min(marks) if marks else LONG_MIN


def merge_reports(into: dict, report: dict) -> None:
    for uid, splits in report.items():
        mine = into.setdefault(uid, {})
        for split, max_ts in splits.items():
            mine[split] = max(mine.get(split, LONG_MIN), max_ts)
