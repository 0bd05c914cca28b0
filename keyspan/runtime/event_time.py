"""Watermarks at epoch boundaries: one function, run by tasks and by the driver on the same inputs.

Every source and every ``assign_timestamps_and_watermarks`` operator is a watermark *origin*. Its
tasks report, per split, the largest event timestamp of the epoch's records. A split is a subtask
of the origin, a keyspan source as a whole, or a split the source names itself (a Kafka partition,
Flink's per-split watermarks); a named split set may change from epoch to epoch (partitions
discovered, or finished). After epoch e the origin's watermark is ``max(previous, min over live
splits of (max timestamp − bound − 1))``, or Long.MAX once all its input is read. An operator's
watermark is the minimum over the origins upstream of it. Records of epoch e+1 are judged late
against the watermark reached after epoch e, and event-time timers up to it fire at the end of
epoch e; so results depend on the data, not on where epochs cut it, as long as disorder stays
within the bound (docs/event-time.md).
"""

from __future__ import annotations

from keyspan.common.clock import LONG_MAX, LONG_MIN  # noqa: F401 — the range watermarks live in


def advance(origins: dict[str, dict], state: dict, reports: dict[str, dict], now: int, finished,
            named: dict[str, list] | None = None) -> dict:
    """The origins' time state after an epoch. ``state``: uid → {"wm", "splits": {split: [max ts,
    last active ms]}}; ``reports``: uid → {split: max ts of this epoch's records}; ``finished``: uids
    of origins whose whole input has been read by the end of this epoch; ``named``: uid → the names of
    the splits its source reads in this epoch (the others have ``spec["splits"]`` splits "0".."n-1").

    As in Flink: a split that produced no record for the idleness timeout is idle and does not hold
    the watermark back (it counts from when the split joined); a split never seen holds it at
    Long.MIN unless it is idle; with every split idle the watermark stays; it never goes back."""
    new = {}
    for uid, spec in origins.items():
        prev = state.get(uid) or {"wm": LONG_MIN, "splits": {}}
        names = (named or {}).get(uid)
        names = [str(i) for i in range(spec["splits"])] if names is None else names
        # only the epoch's splits are kept: one that left (a rescaled-away subtask, a finished
        # partition) holds nothing back; one that joins starts its idleness clock now
        splits = {k: list(prev["splits"].get(k) or [LONG_MIN, now]) for k in names}
        for split, max_ts in reports.get(uid, {}).items():
            if split in splits:
                splits[split] = [max(splits[split][0], max_ts), now]
        watermark = prev["wm"]
        if uid in finished:
            watermark = LONG_MAX
        elif spec["bound_ms"] is not None:
            idle = spec["idleness_ms"]
            live = [ts for ts, last_active in splits.values() if not (idle and now - last_active >= idle)]
            if live and min(live) > LONG_MIN:
                watermark = max(watermark, min(live) - spec["bound_ms"] - 1)
        new[uid] = {"wm": watermark, "splits": splits}
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
