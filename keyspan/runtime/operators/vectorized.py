"""The chunk-at-a-time paths: the columnar fast path of known aggregations, and the folding path of
windows with your own reduce or aggregate function (docs/aggregations.md).

A keyed operator here has ``process_batch(backend, ctx, kgs, keys, records, stamps)``: the stage
hands it a whole chunk of records (up to 16k) instead of one record at a time. It returns the
chunk's outputs (with their timestamps) and the indices of records it left to the per-record path
(e.g. late ones), or ``None`` when the chunk does not qualify (an untyped field, NaN, …) — then the
whole chunk runs through ``process_element`` record by record, exactly as without the fast path. Both
paths keep the same values in the same states, so which one ran never shows in checkpoints, savepoints
or results (only the order in which one timer lists the windows sharing it may differ: docs/aggregations.md).

* ``RollingAggregateOperator`` — ``KeyedStream.sum/min/max/min_by/max_by``: one output per record,
  the key's running value, computed as grouped cumulative sums/minima offset by the stored value;
  state is read and written once per key and chunk instead of once per record. Fed by a Spark source
  keyed in the JVM, ``process_columns`` takes the Arrow columns themselves and returns its outputs
  as an Arrow batch, which a sink that takes columns writes as it is.
* ``VectorizedWindowOperator`` — ``window(...).aggregate(f)`` with a ``BatchAggregateFunction`` on
  event-time tumbling/sliding windows and the default trigger: each chunk is pre-aggregated per
  (key, window) and merged into the window's accumulator; firing, lateness and cleanup stay the
  window operator's own.
* ``FoldingWindowOperator`` — the same windows with your own ``ReduceFunction``/``AggregateFunction``,
  or a ``process``/``apply`` window function that keeps every record: not columnar (your function
  runs once per record), but each (key, window)'s records of a chunk are added to its pane in one
  state access, in their order of arrival.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from keyspan.common.types import Row, rows_of_arrow
from keyspan.datastream.aggregates import BatchAggregateFunction, RollingAggregation, replace_field, segments
from keyspan.datastream.window import (
    EventTimeTrigger,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WindowOperationDescriptor,
)
from keyspan.runtime.operators.window import WindowOperator
from keyspan.runtime.protocol import RecordFailed
from keyspan.state.api import EVENT_TIME, AggregatingStateDescriptor, ListStateDescriptor, ReducingStateDescriptor
from keyspan.state.internal import private

__all__ = ["FoldingWindowOperator", "RollingAggregateOperator", "VectorizedWindowOperator", "vectorized"]


def vectorized(fn):
    """The chunk-at-a-time operator for runtime function ``fn`` (columnar for a known aggregation,
    folding for a window with your own reduce or aggregate function), or None."""
    if isinstance(fn, WindowOperationDescriptor):
        contents = fn.window_state_descriptor
        if not (type(fn.assigner) in (TumblingEventTimeWindows, SlidingEventTimeWindows)
                and type(fn.trigger) is EventTimeTrigger):
            return None
        if isinstance(contents, AggregatingStateDescriptor) and isinstance(contents.agg_function,
                                                                           BatchAggregateFunction):
            return VectorizedWindowOperator(fn)
        if isinstance(contents, (AggregatingStateDescriptor, ReducingStateDescriptor, ListStateDescriptor)):
            return FoldingWindowOperator(fn)
        return None
    wrapped = fn.wrapped_user_function() if hasattr(fn, "wrapped_user_function") else None
    if isinstance(wrapped, RollingAggregation) and hasattr(fn, "STATE"):
        return RollingAggregateOperator(fn)
    return None


def _key_codes(keys: list):
    """Key → dense code in order of first appearance; the codes per record and the first index of each."""
    index: dict = {}
    setdefault = index.setdefault
    codes = np.fromiter((setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    return codes, first_appearances(codes), len(index)


def first_appearances(codes):
    """The index of each code's first record, for codes numbered in order of first appearance
    (``pd.factorize``, ``dictionary_encode``): where the running maximum steps up. One pass, no sort."""
    return np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)


def _arrow_key_codes(columns: list):
    """Keys held in one or more Arrow columns: each record's dense key code, each code's first record,
    and each code's key (a tuple of the columns' values for several columns, as the selector gives)."""
    if len(columns) == 1:
        encoded = columns[0].dictionary_encode()  # codes in order of first appearance
        codes = encoded.indices.to_numpy().astype(np.int64)
        return codes, first_appearances(codes), encoded.dictionary.to_pylist()
    codes = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:  # kept dense after each column, so the combined code cannot overflow
        indices = column.dictionary_encode().indices.to_numpy().astype(np.int64)
        _, codes = np.unique(codes * (int(indices.max()) + 1) + indices, return_inverse=True)
    _, firsts = np.unique(codes, return_index=True)
    at = pa.array(firsts)
    return codes, firsts, list(zip(*(column.take(at).to_pylist() for column in columns)))


def _numeric(values: list):
    """``values`` as int64 (all ints, sums cannot overflow) or float64 (all floats, no NaN), else None."""
    kinds = set(map(type, values))
    if kinds == {int}:
        limit = 2 ** 62 // (len(values) + 1)
        if max(values) >= limit or min(values) <= -limit:
            return None
        return np.array(values, dtype=np.int64)
    if kinds == {float}:
        arr = np.array(values, dtype=np.float64)
        return None if np.isnan(arr).any() else arr
    return None


def _bases_fit(base_values: list, python_type: type) -> bool:
    """The keys' stored running values (None: no state yet) can join a chunk of ``python_type`` values:
    the same type, no NaN, and far enough inside int64 that the chunk's sum cannot leave it."""
    stored = [b for b in base_values if b is not None]
    return not stored or (set(map(type, stored)) == {python_type} and max(map(abs, stored)) < 2 ** 62
                          and not any(b != b for b in stored))


def _running(kind: str, column, codes, n_keys: int, base_values: list):
    """Each record's running sum/min/max of its key, the key's stored value folded into its first
    record of the chunk (as the per-record path does); also the key-sorted order and its bounds."""
    order, bounds = segments(codes, n_keys)
    sorted_values = column[order]
    if any(b is not None for b in base_values):
        has_base = np.fromiter((b is not None for b in base_values), dtype=bool, count=n_keys)
        base = np.array([0 if b is None else b for b in base_values], dtype=column.dtype)[has_base]
        at = bounds[:-1][has_base]
        fold = {"sum": np.add, "min": np.minimum, "max": np.maximum}[kind]
        sorted_values[at] = fold(base, sorted_values[at])
    running = _grouped_accumulate(kind, sorted_values, bounds, column.dtype)
    result = np.empty_like(running)
    result[order] = running
    return result, order, bounds


def _grouped_accumulate(kind, sorted_values, bounds, dtype):
    n_keys = len(bounds) - 1
    if kind == "sum" and dtype == np.int64:
        total = np.cumsum(sorted_values)
        before = np.concatenate(([0], total))[bounds[:-1]]  # the sum of all earlier keys' segments
        seg = np.repeat(np.arange(n_keys), np.diff(bounds))
        return total - before[seg]
    ufunc = {"sum": np.add, "min": np.minimum, "max": np.maximum}[kind]
    if kind == "sum":  # floats: accumulate each key on its own, in arrival order, like Python's additions
        out = np.empty_like(sorted_values)
        for k in range(n_keys):
            s, e = bounds[k], bounds[k + 1]
            out[s:e] = ufunc.accumulate(sorted_values[s:e])
        return out
    seg = np.repeat(np.arange(n_keys), np.diff(bounds))
    import pandas as pd

    series = pd.Series(sorted_values)
    grouped = series.groupby(seg, sort=False)
    return (grouped.cummin() if kind == "min" else grouped.cummax()).to_numpy(dtype=sorted_values.dtype)


def _winners(kind: str, column, codes, n_keys: int, base_values: list):
    """min_by/max_by: for each record, the index of the record holding its key's running extremum (the
    first one on ties, as Flink's), or -1 while the key's stored record still wins; also the key-sorted
    order and its bounds."""
    import pandas as pd

    order, bounds = segments(codes, n_keys)
    sorted_values = column[order]
    seg = np.repeat(np.arange(n_keys), np.diff(bounds))
    starts = bounds[:-1]
    better = np.less if kind == "min_by" else np.greater
    folded = sorted_values.copy()
    for k, b in enumerate(base_values):  # the stored record competes first
        if b is not None and not better(folded[starts[k]], b):
            folded[starts[k]] = b
    grouped = pd.Series(folded).groupby(seg, sort=False)
    running = (grouped.cummin() if kind == "min_by" else grouped.cummax()).to_numpy(dtype=folded.dtype)
    previous = np.empty_like(running)
    previous[1:] = running[:-1]
    new_best = better(sorted_values, previous)
    for k, b in enumerate(base_values):
        new_best[starts[k]] = True if b is None else bool(better(sorted_values[starts[k]], b))
    positions = np.where(new_best, order, -1)
    chosen = np.empty_like(positions)
    chosen[order] = pd.Series(positions).groupby(seg, sort=False).cummax().to_numpy()
    return chosen, order, bounds


class RollingAggregateOperator:
    """``_KeyedReduce`` over a ``RollingAggregation`` (same state, same per-record path), plus the
    chunk-at-a-time paths: a list of records (``process_batch``) or Arrow columns (``process_columns``)."""

    # its output batches carry no timestamps, so a chunk with timestamps takes the list path
    columns_take_timestamps = False
    records_metric = "numRecordsVectorized"  # the metric counting the records a chunk path took

    def __init__(self, keyed_reduce):
        self._per_record = keyed_reduce
        self._agg: RollingAggregation = keyed_reduce.wrapped_user_function()

    # the per-record path and lifecycle are the wrapped operator's
    def open(self, runtime_context):
        self._per_record.open(runtime_context)

    def close(self):
        self._per_record.close()

    def wrapped_user_function(self):
        return self._agg

    def process_element(self, value, ctx):
        return self._per_record.process_element(value, ctx)

    def __getattr__(self, name):  # anything else the runtime asks of the operator (e.g. its STATE)
        if name.startswith("__") or name == "_per_record":
            raise AttributeError(name)
        return getattr(self._per_record, name)

    def process_batch(self, backend, ctx, kgs, keys, records, stamps):
        if 4 * len(set(keys)) > len(records):
            return None  # fewer than 4 records per key: batching costs more than it saves (bench/fast_aggregation.py)
        agg = self._agg
        kind = agg.kind
        first = records[0]
        record_type = type(first)
        if any(type(r) is not record_type for r in records):
            return None
        scalar = record_type in (int, float)
        if isinstance(agg.position, str):
            typed = isinstance(first, Row) and first._fields is not None  # a field by name needs a named Row
        else:
            typed = scalar or isinstance(first, (tuple, list))
        if not typed:
            return None
        values = records if scalar else list(map(agg._get, records))
        column = _numeric(values)
        if column is None:
            return None
        codes, firsts, n_keys = _key_codes(keys)
        state = self._per_record._state
        # the stored running value of every key of the chunk: one state read per key
        bases = []
        for i in firsts.tolist():
            backend.current_key = keys[i]
            backend.current_key_group = kgs[i]
            bases.append(state.value())
        base_values = [None if b is None else (b if scalar else agg._get(b)) for b in bases]
        if not _bases_fit(base_values, type(values[0])):
            return None  # a stored value of another type, or one a sum could carry out of int64
        if kind in ("sum", "min", "max"):
            result, order, bounds = _running(kind, column, codes, n_keys, base_values)
            heads = [records[i] if b is None else b for i, b in zip(firsts.tolist(), bases)]
            pos = agg.position
            if scalar:
                outputs = result.tolist()
            elif isinstance(first, tuple):
                # each key's record around the aggregated field, split once per key (not per record)
                parts = []
                cut = tuple.__getitem__
                for h in heads:
                    i = h._fields.index(pos) if isinstance(pos, str) else pos % len(h)
                    parts.append((type(h), cut(h, slice(0, i)), cut(h, slice(i + 1, None))))
                new = tuple.__new__
                outputs = [new(cls, pre + (v,) + post)
                           for (cls, pre, post), v in zip(map(parts.__getitem__, codes.tolist()), result.tolist())]
            else:
                outputs = [replace_field(heads[c], pos, v) for c, v in zip(codes.tolist(), result.tolist())]
        else:
            chosen, order, bounds = _winners(kind, column, codes, n_keys, base_values)
            outputs = [records[w] if w >= 0 else bases[c] for w, c in zip(chosen.tolist(), codes.tolist())]
        # the last running value of every key goes back to state: one write per key
        lasts = order[bounds[1:] - 1].tolist()
        for i in lasts:
            backend.current_key = keys[i]
            backend.current_key_group = kgs[i]
            state.update(outputs[i])
        return outputs, stamps, ()

    def process_columns(self, backend, ctx, kgs, keys, batch, row_cls, stamps):
        """A chunk of a Spark source keyed by columns, as Arrow columns (``kgs`` a NumPy array of key
        groups, ``keys`` the key columns, ``batch`` the fields of ``row_cls``): the outputs as an Arrow
        batch of the same fields, without a Python object per record, and no records left over. None
        (nothing done) when the chunk does not qualify: a field that is not a number, nulls, NaN, float
        keys, stored values of another type; it then runs record by record. Records with timestamps
        never come here (``columns_take_timestamps``)."""
        agg = self._agg
        kind = agg.kind
        at = agg._index_in(row_cls)
        if at is None or not batch.num_rows:
            return None
        field = batch.column(at)
        if field.null_count or any(k.null_count or pa.types.is_floating(k.type) for k in keys):
            return None
        if pa.types.is_integer(field.type) and field.type != pa.uint64():
            column = field.to_numpy().astype(np.int64)
            limit = 2 ** 62 // (len(column) + 1)
            if column.max() >= limit or column.min() <= -limit:
                return None
            python_type = int
        elif pa.types.is_floating(field.type):
            column = field.to_numpy().astype(np.float64)
            if np.isnan(column).any():
                return None
            python_type = float
        else:
            return None
        codes, firsts, uniques = _arrow_key_codes(keys)
        key_groups = kgs[firsts].tolist()
        prefetch = getattr(backend, "prefetch", None)
        if prefetch is not None:
            prefetch(key_groups, uniques)
        state = self._per_record._state
        bases = []  # the stored running record of every key of the chunk: one state read per key
        for key, kg in zip(uniques, key_groups):
            backend.current_key = key
            backend.current_key_group = kg
            bases.append(state.value())
        if any(b is not None and type(b) is not row_cls for b in bases):
            return None
        base_values = [None if b is None else b[at] for b in bases]
        if not _bases_fit(base_values, python_type):
            return None
        # each key's stored record as a row of the chunk's columns, appended after the chunk's rows
        has_base = np.array([b is not None for b in bases], dtype=bool)
        try:
            rows = batch if not has_base.any() else pa.concat_batches([batch, pa.RecordBatch.from_arrays(
                [pa.array([None if b is None else b[i] for b in bases], type=col.type)
                 for i, col in enumerate(batch.columns)], schema=batch.schema)])
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            return None  # a stored field that no longer fits its column
        stored_row = len(batch) + codes  # each record's key's stored record, in ``rows``
        if kind in ("sum", "min", "max"):
            result, order, bounds = _running(kind, column, codes, len(uniques), base_values)
            # the other fields are the key's first record's: the stored one, or its first of this chunk
            heads = np.where(has_base[codes], stored_row, firsts[codes])
            taken = rows.take(pa.array(heads))
            outputs = taken.set_column(at, batch.schema.field(at).with_type(pa.from_numpy_dtype(result.dtype)),
                                       pa.array(result))
        else:
            chosen, order, bounds = _winners(kind, column, codes, len(uniques), base_values)
            outputs = rows.take(pa.array(np.where(chosen >= 0, chosen, stored_row)))
        # the last running record of every key goes back to state: one write per key
        lasts = rows_of_arrow(outputs.take(pa.array(order[bounds[1:] - 1])))
        for key, kg, last in zip(uniques, key_groups, lasts):
            backend.current_key = key
            backend.current_key_group = kg
            state.update(last)
        return outputs, ()


class ChunkedWindowOperator(WindowOperator):
    """The window operator taking a chunk of records at a time on event-time tumbling/sliding windows
    with the default trigger (``_merge_chunk``): a subclass says how a (key, window) group's records
    reach the window's pane (``_add_groups``) and whether their order within a window matters."""

    records_metric = "numRecordsVectorized"

    def _add_groups(self, rows) -> list[bool]:
        """Adds each (key, key group, window, what ``accumulate`` made of the group's records) of
        ``rows`` to its pane, in order; whether each pane held something before."""
        raise NotImplementedError

    def _order_free(self) -> bool:
        """Whether a window's records may reach its pane in any order (a commutative aggregate)."""
        return False

    def _stamped_chunk(self, backend, ctx, kgs, keys, stamps, accumulate):
        """``_merge_chunk`` over a chunk of records as lists (``process_batch``); the records left to the
        per-record path, or None when the chunk does not qualify."""
        if stamps is None or None in stamps:
            return None
        codes, firsts, _ = _key_codes(keys)
        return self._merge_chunk(backend, ctx, np.array(stamps, dtype=np.int64), codes, np.array(kgs, dtype=np.int64),
                                 [keys[i] for i in firsts.tolist()], accumulate)

    def _merge_chunk(self, backend, ctx, ts, codes, kgs, uniques: list, accumulate):
        """Groups a chunk per (key, window) (``accumulate(rows, group of each row, groups)``: one value
        per group) and adds each group to its window's pane (``_add_groups``); the indices of the
        records left to the per-record path, or None if the chunk does not qualify.
        ``codes``: each record's key as an index into ``uniques``; ``kgs``: each record's key group."""
        timers = ctx.timer_service()
        self._timer_service = timers
        watermark = timers.current_watermark()
        assigner = self._assigner
        size = assigner._size
        tumbling = isinstance(assigner, TumblingEventTimeWindows)
        if tumbling:
            first_start = ts - (ts - assigner._offset) % size
        else:  # sliding: windows [last, last - slide, …] while start > ts - size
            slide = assigner._slide
            last = ts - (ts - assigner._offset) % slide
            per_record = -(-(last - ts + size) // slide)
            first_start = last - (per_record - 1) * slide
        # a record with a window the watermark has passed fires that window at once or is late: it
        # runs record by record after the rest. Only such windows can fire, and columnar records
        # never touch them; they share other windows only when sliding, where order matters unless
        # the aggregate is commutative.
        special = first_start + size - 1 <= watermark
        if special.all() or (special.any() and not tumbling and not self._order_free()):
            return None
        keep = np.flatnonzero(~special)
        if tumbling:
            rows, starts = keep, first_start[keep]
        else:  # one row per (record, window), in the assigner's window order
            counts = per_record[keep]
            rows = np.repeat(keep, counts)
            step = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
            starts = last[rows] - step * slide
        import pandas as pd

        window_ids, window_starts = pd.factorize(starts)
        group_of_row, group_heads = pd.factorize(codes[rows] * (int(window_ids.max()) + 1) + window_ids)
        group_of_row = group_of_row.astype(np.int64)
        accumulators = accumulate(rows, group_of_row, len(group_heads))
        heads = first_appearances(group_of_row)  # each group's first row, in group order
        contents = self._contents
        register_timer = self._register_timer
        lateness = self._allowed_lateness  # without it, the cleanup timer is the trigger's timer
        # each group's window, key and key group as Python values, taken for the whole chunk at once
        first_records = rows[heads]
        head_keys = list(map(uniques.__getitem__, codes[first_records].tolist()))
        head_kgs = kgs[first_records].tolist()
        chunk_windows = list(map(self._shared_window, window_starts.tolist()))  # a few per chunk
        windows = list(map(chunk_windows.__getitem__, window_ids[heads].tolist()))
        found = self._add_groups(zip(head_keys, head_kgs, windows, accumulators))
        # EventTimeTrigger.on_element for a window the watermark has not passed: a timer at its end
        if lateness:
            for window, key, kg in zip(windows, head_keys, head_kgs):
                backend.current_key = key
                backend.current_key_group = kg
                contents.set_current_namespace(window)
                register_timer(EVENT_TIME, window.max_timestamp(), window)
                self._register_cleanup_timer(window)
            return np.flatnonzero(special).tolist()
        # without lateness that timer is also the cleanup timer, which a window's first record
        # registered (WindowOperator.process_element): only new windows register it, all in one call
        ends = (starts[heads] + (size - 1)).tolist()
        new = [(key, kg, end, window)
               for key, kg, end, window, stored in zip(head_keys, head_kgs, ends, windows, found) if not stored]
        held = self._timer_service.add_timer_namespaces(EVENT_TIME, new)
        for (key, kg, end, window), before in zip(new, held):
            if before is True:  # a timer restored from before timers held their windows: moved into it here
                backend.current_key = key
                backend.current_key_group = kg
                register_timer(EVENT_TIME, end, window)
        return np.flatnonzero(special).tolist()


class VectorizedWindowOperator(ChunkedWindowOperator):
    """The window operator with chunk-at-a-time paths for ``BatchAggregateFunction``s: a list of
    records (``process_batch``) or the Arrow columns of a Spark source keyed and timestamped by its
    columns (``process_columns``)."""

    columns_take_timestamps = True

    def _add_groups(self, rows) -> list[bool]:
        return self._contents.add_accumulators(rows)

    def _order_free(self) -> bool:
        return self._descriptor.window_state_descriptor.agg_function.commutative

    def process_batch(self, backend, ctx, kgs, keys, records, stamps):
        agg = self._descriptor.window_state_descriptor.agg_function

        def accumulate(rows, groups, n_groups):
            return agg.accumulate_groups([records[i] for i in rows.tolist()], groups, n_groups)

        late = self._stamped_chunk(backend, ctx, kgs, keys, stamps, accumulate)
        return None if late is None else ((), None, late)

    def process_columns(self, backend, ctx, kgs, keys, batch, row_cls, stamps):
        """The chunk's records never become Python objects: the aggregate reads the Arrow columns
        (``accumulate_columns``). Returns no outputs (windows fire on timers) and the records left to
        the per-record path, or None when the chunk does not qualify."""
        if stamps is None:
            return None
        codes, _, uniques = _arrow_key_codes(keys)
        agg = self._descriptor.window_state_descriptor.agg_function

        def accumulate(rows, groups, n_groups):
            # rows are indices into the chunk, never decreasing: n of them, strictly increasing, are all of it
            whole = len(rows) == batch.num_rows and bool((rows[1:] > rows[:-1]).all())
            taken = batch if whole else batch.take(pa.array(rows))
            return agg.accumulate_columns(taken, groups, n_groups)

        late = self._merge_chunk(backend, ctx, stamps, codes, kgs, uniques, accumulate)
        return None if late is None else (None, late)


class FoldingWindowOperator(ChunkedWindowOperator):
    """The window operator for your own ``ReduceFunction`` or ``AggregateFunction`` (``reduce``,
    ``aggregate``), or a window function that keeps every record (``process``, ``apply``), on
    event-time tumbling/sliding windows with the default trigger, a chunk of records at a time: each
    (key, window)'s records of the chunk are added to the window's pane in their order of arrival,
    your function called once per record as on the per-record path, with one state access per window
    instead of the window machinery per record. A failing call names its record (``RecordFailed``)."""

    records_metric = "numRecordsFolded"  # not columnar: numRecordsVectorized stays the columnar path's

    def __init__(self, descriptor):
        super().__init__(descriptor)
        contents = descriptor.window_state_descriptor
        self._keeps_records = isinstance(contents, ListStateDescriptor)
        if self._keeps_records:
            self._fold = _appended
        elif isinstance(contents, AggregatingStateDescriptor):
            agg = contents.agg_function
            self._fold = _aggregate_fold(agg.create_accumulator, agg.add)
        else:
            function = contents.reduce_function
            self._fold = _reduce_fold(getattr(function, "reduce", function))

    def _add_groups(self, rows) -> list[bool]:
        return self._contents.fold_each(rows, self._fold, copy=not self._keeps_records)

    def process_batch(self, backend, ctx, kgs, keys, records, stamps):
        if self._keeps_records and any(r is None for r in records):
            return None  # the per-record path refuses a None element of list state, naming it
        def gather(rows, groups, n_groups):  # each group's records, in arrival order
            order, bounds = segments(groups, n_groups)
            chosen = list(map(records.__getitem__, rows[order].tolist()))
            cuts = bounds.tolist()
            return [chosen[start:end] for start, end in zip(cuts, cuts[1:])]

        late = self._stamped_chunk(backend, ctx, kgs, keys, stamps, gather)
        return None if late is None else ((), None, late)


def _appended(stored, records):
    """A pane that keeps every record (``ListState.add_all``), without changing the stored list."""
    return list(records) if stored is None else [*stored, *records]


def _aggregate_fold(create_accumulator, add):
    """A pane's accumulator after ``add`` of each record, as ``AggregatingState.add`` leaves it."""

    def fold(accumulator, records):
        record = None
        try:
            if accumulator is None:
                accumulator = create_accumulator()
            for record in records:
                accumulator = add(record, accumulator)
        except Exception as exc:
            raise RecordFailed(record) from exc
        return accumulator
    return fold


def _reduce_fold(reduce):
    """A pane's value after reducing each record into it, as ``ReducingState.add`` leaves it: an empty
    pane takes its first record as it is, and a reduce is handed a copy of it, never the record
    itself, which may belong to other (sliding) windows too. The per-record path reduces into a
    private copy of the stored value (the heap) or one read afresh (RocksDB)."""

    def fold(value, records):
        record = None
        try:
            if value is None:
                value = records[0]
                if len(records) == 1:
                    return value
                value = private(value)
                records = records[1:]
            for record in records:
                value = reduce(value, record)
        except Exception as exc:
            raise RecordFailed(record) from exc
        return value
    return fold
