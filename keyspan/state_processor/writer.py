"""Writing savepoints offline — Flink's ``SavepointWriter`` and ``OperatorTransformation``, on Spark
DataFrames: bootstrap an operator's state from history, remove an operator, rewrite one state with a
DataFrame function, or change the max parallelism (every key re-assigned to its new key group)."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from keyspan.checkpoint import savepoint as savepoint_format
from keyspan.checkpoint.handles import is_keyed
from keyspan.io import serde
from keyspan.state.keygroups import DEFAULT_MAX_PARALLELISM, check_parallelism
from keyspan.state_processor import plans
from keyspan.state_processor import tasks as T
from keyspan.state_processor.reader import SavepointReader
from keyspan.state_processor.functions import (
    BroadcastStateBootstrapFunction,
    KeyedStateBootstrapFunction,
    StateBootstrapFunction,
    uid_of,
)

# the rows between the stages of a write (Spark DDL for Spark, the same as Arrow schemas for the tasks)
_ROUTED = "_ks_task int, _ks_kg int, _ks_key binary, _ks_value binary"
_ROUTED_ARROW = pa.schema([("_ks_task", pa.int32()), ("_ks_kg", pa.int32()), ("_ks_key", pa.binary()),
                           ("_ks_value", pa.binary())])
_ENTRIES = "_ks_task int, _ks_kg int, state string, key binary, value binary, pos long, map_key binary"
_ENTRIES_ARROW = pa.schema([("_ks_task", pa.int32()), ("_ks_kg", pa.int32()), ("state", pa.string()),
                            ("key", pa.binary()), ("value", pa.binary()), ("pos", pa.int64()),
                            ("map_key", pa.binary())])
_HANDLES = "handle string"


def _spark_of(df):
    return df.sparkSession


def _default_tasks(spark, max_parallelism: int) -> int:
    return min(max_parallelism, max(2, spark.sparkContext.defaultParallelism))


# -- OperatorTransformation ------------------------------------------------------------------------------

class OperatorTransformation:
    @staticmethod
    def bootstrap_with(df) -> "OneInputOperatorTransformation":
        """Start a bootstrap from a Spark DataFrame of historical rows (each a ``Row`` with named fields)."""
        return OneInputOperatorTransformation(df)


class OneInputOperatorTransformation:
    def __init__(self, df):
        self.df = df
        self.max_parallelism: int | None = None

    def set_max_parallelism(self, max_parallelism: int) -> "OneInputOperatorTransformation":
        check_parallelism(1, max_parallelism)
        self.max_parallelism = max_parallelism
        return self

    def key_by(self, key_selector) -> "KeyedOperatorTransformation":
        """``key_selector``: a function of the row, a ``KeySelector``, or a column name."""
        if isinstance(key_selector, str):
            column = key_selector
            key_selector = lambda row: row[column]  # noqa: E731
        elif hasattr(key_selector, "get_key"):
            key_selector = key_selector.get_key
        return KeyedOperatorTransformation(self, key_selector)

    def transform(self, function) -> "StateBootstrapTransformation":
        """Operator state: a ``StateBootstrapFunction`` (each Spark partition of the input is one subtask)
        or a ``BroadcastStateBootstrapFunction`` (all rows, one copy shared by every subtask)."""
        if not isinstance(function, (StateBootstrapFunction, BroadcastStateBootstrapFunction)):
            raise TypeError(f"transform() without key_by needs a StateBootstrapFunction or "
                            f"BroadcastStateBootstrapFunction, got {type(function).__name__}; key_by(...) first "
                            "for a KeyedStateBootstrapFunction")
        return StateBootstrapTransformation(self, None, function)


class KeyedOperatorTransformation:
    def __init__(self, source: OneInputOperatorTransformation, key_selector):
        self.source = source
        self.key_selector = key_selector

    def transform(self, function: KeyedStateBootstrapFunction) -> "StateBootstrapTransformation":
        if not isinstance(function, KeyedStateBootstrapFunction):
            raise TypeError(f"key_by(...).transform() needs a KeyedStateBootstrapFunction, got {type(function).__name__}")
        return StateBootstrapTransformation(self.source, self.key_selector, function)


class StateBootstrapTransformation:
    """An operator's state, to be written by ``SavepointWriter.with_operator``."""

    def __init__(self, source: OneInputOperatorTransformation, key_selector, function):
        self.source = source
        self.key_selector = key_selector
        self.function = function

    def write_into(self, target: str, uid: str, max_parallelism: int, epoch: int) -> tuple[list[dict], list[dict]]:
        """Run the bootstrap in Spark tasks; returns (state handles, keyed state descriptors)."""
        if self.source.max_parallelism not in (None, max_parallelism):
            raise ValueError(f"operator '{uid}' is bootstrapped with max parallelism {self.source.max_parallelism} "
                             f"but the savepoint has {max_parallelism}: one savepoint has one max parallelism")
        df = self.source.df
        spark = _spark_of(df)
        serde.ship_user_modules([self.function, self.key_selector])
        shipped = serde.dumps_function((self.function, self.key_selector))  # user code by value
        if self.key_selector is None:
            broadcast = isinstance(self.function, BroadcastStateBootstrapFunction)
            if broadcast:
                df = df.coalesce(1)
            parallelism = 1 if broadcast else min(max_parallelism, df.rdd.getNumPartitions())

            def operator_task(batches):
                from pyspark import TaskContext

                task = TaskContext.get().partitionId()
                values = (T.record(r) for b in batches for r in b.to_pylist())
                function = serde.loads_code(shipped)[0]
                handle = T.bootstrap_operator_state(target, uid, epoch, task, parallelism, function, values, broadcast)
                yield pa.RecordBatch.from_pylist([{"handle": json.dumps(handle)}])

            handles = [json.loads(r.handle) for r in df.mapInArrow(operator_task, _HANDLES).collect()]
            return handles, []

        write = T.KeyedWrite(target, uid, max_parallelism, _default_tasks(spark, max_parallelism), epoch)
        def route(batches):
            selector = serde.loads_code(shipped)[1]
            for b in batches:
                rows = [T.record(r) for r in b.to_pylist()]
                keys = [selector(r) for r in rows]
                routes = [write.route(k) for k in keys]
                yield pa.RecordBatch.from_pydict({
                    "_ks_task": [t for _, t in routes], "_ks_kg": [kg for kg, _ in routes],
                    "_ks_key": [serde.dumps(k) for k in keys], "_ks_value": [serde.dumps(r) for r in rows]},
                    schema=_ROUTED_ARROW)

        def bootstrap(batches):
            from pyspark import TaskContext

            task = TaskContext.get().partitionId()
            records = ((kg, serde.loads(k), serde.loads(v)) for b in batches
                       for kg, k, v in zip(b.column("_ks_kg").to_pylist(), b.column("_ks_key").to_pylist(),
                                           b.column("_ks_value").to_pylist()))
            handle, states = write.bootstrap(task, serde.loads_code(shipped)[0], records)
            yield pa.RecordBatch.from_pylist([{"handle": json.dumps({"handle": handle, "states": states})}])

        routed = df.mapInArrow(route, _ROUTED).repartitionById(write.tasks, "_ks_task")
        results = [json.loads(r.handle) for r in routed.mapInArrow(bootstrap, _HANDLES).collect()]
        states = {d["name"]: d for r in results for d in r["states"]}
        return [r["handle"] for r in results if r["handle"]], sorted(states.values(), key=lambda d: d["name"])


# -- SavepointWriter ---------------------------------------------------------------------------------------

class SavepointWriter:
    """Collects changes to a savepoint (or a new one) and writes them as a new savepoint with ``write``."""

    def __init__(self, spark, base: dict | None, max_parallelism: int):
        self.spark = spark
        self.base = base
        self.max_parallelism = max_parallelism
        self._removed: list[str] = []
        self._added: dict[str, StateBootstrapTransformation] = {}
        self._transforms: dict[str, list] = {}
        self._operations: list[str] = []

    @staticmethod
    def from_existing_savepoint(spark, path: str) -> "SavepointWriter":
        metadata = plans.load(path, verify=True)
        return SavepointWriter(spark, metadata, metadata["max_parallelism"])

    @staticmethod
    def new_savepoint(spark, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> "SavepointWriter":
        check_parallelism(1, max_parallelism)
        return SavepointWriter(spark, None, max_parallelism)

    def remove_operator(self, operator) -> "SavepointWriter":
        uid = uid_of(operator)
        if self.base is None or uid not in self._base_uids():
            raise LookupError(f"cannot remove operator '{uid}': the savepoint has no such operator "
                              f"(operators: {', '.join(sorted(self._base_uids())) or 'none'})")
        self._removed.append(uid)
        self._operations.append(f"removed operator {uid}")
        return self

    def with_operator(self, operator, transformation: StateBootstrapTransformation) -> "SavepointWriter":
        """Add an operator's state bootstrapped from a DataFrame (replacing the operator's state if the
        savepoint has it)."""
        uid = uid_of(operator)
        self._added[uid] = transformation
        replaced = self.base is not None and uid in self._base_uids()
        self._operations.append(f"{'replaced' if replaced else 'bootstrapped'} operator {uid}")
        return self

    def transform_state(self, operator, state: str, function, *, key_type=None, value_type=None,
                        map_key_type=None) -> "SavepointWriter":
        """Rewrite one keyed state of one operator: ``function`` gets the state's rows as
        ``SavepointReader.read_keyed_state(operator, state=state)`` gives them and returns the rows to
        keep, in the same shape (drop keys, fix values, migrate a schema); the operator's other states
        are kept as they are."""
        uid = uid_of(operator)
        if self.base is None:
            raise ValueError("transform_state needs a savepoint to change: use SavepointWriter.from_existing_savepoint")
        self._transforms.setdefault(uid, []).append((state, function, dict(key_type=key_type, value_type=value_type,
                                                                           map_key_type=map_key_type)))
        self._operations.append(f"transformed state {uid}/{state}")
        return self

    def change_max_parallelism(self, max_parallelism: int) -> "SavepointWriter":
        """Re-key every keyed state to ``max_parallelism`` key groups (restores then allow parallelism
        up to it). Operator state is unaffected."""
        check_parallelism(1, max_parallelism)
        if max_parallelism != self.max_parallelism:
            self._operations.append(f"max parallelism {self.max_parallelism} -> {max_parallelism}")
            self.max_parallelism = max_parallelism
        return self

    def _base_uids(self) -> set[str]:
        return set(self.base["state"]) | {o["uid"] for o in self.base["operators"]} if self.base else set()

    # -- writing ----------------------------------------------------------------------------------------------
    def write(self, path: str, metadata_url: str | None = None) -> str:
        """Write the new savepoint at ``path`` (the source savepoint is never changed) and return its URI.
        It is recorded in the job's version tree (``keyspan savepoints --tree``) when the metadata store
        (``metadata_url``, default: that of keyspan's workdir, if it exists) knows the job."""
        from keyspan.io.storage import Storage

        target = Storage(path)
        if target.exists(savepoint_format.METADATA):
            raise FileExistsError(f"{target.url(savepoint_format.METADATA)} exists: write the new savepoint elsewhere "
                                  "(keyspan never overwrites a savepoint)")
        base = self.base
        epoch = base["epoch"] if base else 0
        state = savepoint_format.restored_manifest(base) if base else {}
        operators = {o["uid"]: dict(o) for o in base["operators"]} if base else {}
        for uid in self._removed:
            state.pop(uid, None)
            operators.pop(uid, None)
        rekey = base is not None and self.max_parallelism != base["max_parallelism"]
        for uid in state:
            if uid not in self._added and (uid in self._transforms or rekey) and any(is_keyed(h) for h in state[uid]):
                state[uid] = self._rewrite(target.uri, uid, state[uid], epoch)
        for uid, transformation in self._added.items():
            handles, states = transformation.write_into(target.uri, uid, self.max_parallelism, epoch)
            state[uid] = handles
            operators[uid] = {"uid": uid, "name": type(transformation.function).__name__, "kind": "bootstrap",
                              "generated": False, "states": states}
        parallelism = min(self.max_parallelism, base["parallelism"] if base else _default_tasks(self.spark,
                                                                                             self.max_parallelism))
        uri = savepoint_format.write_derived_savepoint(
            target.uri, state=state, operators=list(operators.values()), max_parallelism=self.max_parallelism,
            parallelism=parallelism, base=base, operations=self._operations, key=plans.signing_key())
        self._record(uri, epoch, parallelism, metadata_url)
        return uri

    def _rewrite(self, target: str, uid: str, handles: list[dict], epoch: int) -> list[dict]:
        """An operator's keyed state re-written at the writer's max parallelism, with its transformed states
        replaced by what the transform functions returned; its operator state is kept."""
        spark = self.spark
        base = self.base
        keyed = [h for h in handles if is_keyed(h)]
        source = T.Scan(base["uri"], uid, keyed, base["max_parallelism"], plans.read_tasks(base, uid))
        write = T.KeyedWrite(target, uid, self.max_parallelism, _default_tasks(spark, self.max_parallelism), epoch)
        transforms = self._transforms.get(uid, [])
        replaced = {state for state, _, _ in transforms}
        schema = _ENTRIES_ARROW
        classes = serde.main_module_classes()  # a state's objects may be of classes this program defines

        def read_entries(batches):
            serde.adopt_main_classes(classes)
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    rows = []
                    for _kg, name, key, stored in source.entries(task):
                        if name in replaced:
                            continue
                        kg, dest = write.route(key)
                        rows.append({"_ks_task": dest, "_ks_kg": kg, "state": name, "key": serde.dumps(key),
                                     "value": serde.dumps(stored), "pos": None, "map_key": None})
                        if len(rows) >= T.BATCH_ROWS:
                            yield pa.RecordBatch.from_pylist(rows, schema=schema)
                            rows = []
                    if rows:
                        yield pa.RecordBatch.from_pylist(rows, schema=schema)

        entries = spark.range(0, source.tasks, 1, source.tasks).selectExpr("cast(id as int) as task") \
            .mapInArrow(read_entries, _ENTRIES)
        for state, function, types in transforms:
            serde.ship_user_modules([function])
            plan = plans.KeyedPlan(base, base["uri"], uid, state, **types)
            rows = SavepointReader(spark, base, base["uri"], verify=False)._keyed(plan)
            entries = entries.unionByName(_as_entries(function(rows), state, plan.kind, write))

        def write_task(batches):
            from pyspark import TaskContext

            serde.adopt_main_classes(classes)
            task = TaskContext.get().partitionId()
            handle = write.rewrite(task, _assembled(batches))
            yield pa.RecordBatch.from_pylist([{"handle": json.dumps(handle)}])

        written = entries.repartitionById(write.tasks, "_ks_task").sortWithinPartitions("_ks_kg") \
            .mapInArrow(write_task, _HANDLES).collect()
        return [json.loads(r.handle) for r in written if json.loads(r.handle)] + \
            [h for h in handles if not is_keyed(h)]

    def _record(self, uri: str, epoch: int, parallelism: int, metadata_url: str | None) -> None:
        job_id = (self.base or {}).get("job_id")
        if not job_id:
            return
        from keyspan.checkpoint.metadata import MetadataStore, default_url
        from keyspan.common.settings import load as load_settings

        if metadata_url is None:
            settings = load_settings()
            metadata_url = settings.metadata_url or default_url(settings.workdir)
            if metadata_url.startswith("sqlite:///") and not os.path.exists(metadata_url[len("sqlite:///"):]):
                return
        store = MetadataStore(metadata_url)
        if store.get_job(job_id) is None:
            return
        store.add_savepoint(path=uri, job_id=job_id, epoch=epoch, parallelism=parallelism,
                            code_version=self.base.get("code_version"), restored_from=f"savepoint:{self.base['uri']}",
                            trigger="derived", operations="; ".join(self._operations))


def _as_entries(df, state: str, kind: str, write: T.KeyedWrite):
    """A transformed state's rows (``read_keyed_state`` shape) → entries of the rewrite."""
    schema = _ENTRIES_ARROW

    def convert(batches):
        for b in batches:
            cols = b.to_pydict()
            keys = [_python(k, b.schema.field("key").type) for k in cols["key"]]
            values = [_python(v, b.schema.field("value").type) for v in cols["value"]]
            routes = [write.route(k) for k in keys]
            n = len(keys)
            pos = cols["index"] if kind == "list" else [None] * n
            map_keys = [serde.dumps(_python(m, b.schema.field("map_key").type)) for m in cols["map_key"]] \
                if kind == "map" else [None] * n
            yield pa.RecordBatch.from_pydict({
                "_ks_task": [t for _, t in routes], "_ks_kg": [kg for kg, _ in routes], "state": [state] * n,
                "key": [serde.dumps(k) for k in keys], "value": [serde.dumps(v) for v in values],
                "pos": pos, "map_key": map_keys}, schema=schema)

    columns = ["key", "value"] + (["index"] if kind == "list" else ["map_key"] if kind == "map" else [])
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"the transform of state '{state}' returned columns {df.columns}; it must keep "
                         f"{', '.join(columns)}")
    return df.select(*columns).mapInArrow(convert, _ENTRIES)


def _python(value, arrow_type):
    return serde.loads(value) if pa.types.is_binary(arrow_type) and value is not None else value


def _assembled(batches):
    """Entries in key-group order → (key group, state, key, stored value): list elements and map entries
    of one key (rows of a transformed state) are put together into the key's list or dict."""
    current = None
    pending: dict = {}

    def flush():
        for (state, key), parts in pending.items():
            if isinstance(parts, _Parts):
                yield current, state, key, parts.value()
            else:
                yield current, state, key, parts

    for b in batches:
        cols = b.to_pydict()
        for kg, state, key, value, pos, map_key in zip(cols["_ks_kg"], cols["state"], cols["key"], cols["value"],
                                                       cols["pos"], cols["map_key"]):
            if kg != current:
                yield from flush()
                current, pending = kg, {}
            k = (state, serde.loads(key))
            if pos is None and map_key is None:
                pending[k] = serde.loads(value)
            else:
                parts = pending.setdefault(k, _Parts())
                parts.add(pos, None if map_key is None else serde.loads(map_key), serde.loads(value))
    yield from flush()


class _Parts:
    """The elements (list state) or entries (map state) of one key, gathered from rows."""

    def __init__(self):
        self.elements: list = []
        self.entries: dict = {}

    def add(self, pos, map_key, value) -> None:
        if map_key is not None:
            self.entries[map_key] = value
        else:
            self.elements.append((pos, value))

    def value(self):
        return self.entries if self.entries else [v for _, v in sorted(self.elements, key=lambda e: e[0])]
