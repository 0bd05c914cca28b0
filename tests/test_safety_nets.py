"""Safety nets, each shown by injecting the fault for real: a corrupt or missing file in the latest
checkpoint (restart falls back to the newest intact one, output stays exactly-once), every retained
checkpoint broken (refused, listing what was tried), a retained checkpoint restored with the
metadata store deleted (a plain run refused rather than writing over it), a damaged store named, a changed job restored by uid without deleting a checkpoint, a tampered
savepoint refused before anything in it is unpickled."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from keyspan.checkpoint import statefile
from keyspan.checkpoint.integrity import verify_manifest
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.common import Encoder, Types
from keyspan.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor
from keyspan.io.storage import Storage
from keyspan.runtime import options as run_options
from keyspan.runtime.executor import JobExecutionError

RECORDS = 120
KEYS = 4
PER_EPOCH = 10


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        n = (self.n.value() or 0) + 1
        self.n.update(n)
        yield f"{ctx.get_current_key()} {n}"


def fail_while(flag: str, at: int):
    """A map that fails the job at record ``at`` while the file ``flag`` exists (a crash mid-job)."""

    def fn(value):
        if value[1] == at and os.path.exists(flag):
            raise RuntimeError("injected crash")
        return value

    return fn


class CountInAMap(KeyedProcessFunction):
    """``Count`` changed to keep its count in a map state under the same name."""

    def open(self, ctx):
        self.n = ctx.get_map_state(MapStateDescriptor("n", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.n.get("n") or 0) + 1
        self.n.put("n", n)
        yield f"{ctx.get_current_key()} {n}"


def build(workdir: Path, out: Path, *, extra_filter: bool = False, second_counter: bool = True,
          crash_at: int = 85, counter=Count) -> StreamExecutionEnvironment:
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.set_max_records_per_epoch(PER_EPOCH)
    env.get_checkpoint_config().set_max_delta_chain(3)
    data = [(f"k{i % KEYS}", i) for i in range(RECORDS)]
    stream = env.from_collection(data).uid("numbers").map(fail_while(str(workdir / "crash"), crash_at)).uid("crash")
    if extra_filter:
        stream = stream.filter(lambda r: True).uid("added-filter")
    keyed = stream.key_by(lambda r: r[0])
    counted = keyed.process(counter()).uid("count")
    counted.sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).build()).uid("sink")
    if second_counter:
        keyed.process(Count()).uid("count2").sink_to(
            FileSink.for_row_format(str(out) + "-2", Encoder.simple_string_encoder()).build()).uid("sink2")
    return env


def published(out: Path) -> list[str]:
    return sorted(line for p in out.iterdir() if p.is_file() for line in p.read_text().splitlines())


EXPECTED = sorted(f"k{k} {n}" for k in range(KEYS) for n in range(1, RECORDS // KEYS + 1))


def store() -> MetadataStore:
    return MetadataStore(run_options.current().metadata())


def job_storage(name: str) -> Storage:
    return Storage(run_options.current().checkpoint_root()).child(name)


def crash_run(workdir: Path, name: str, out: Path, **kw) -> list[dict]:
    """Run until the injected crash; return the retained checkpoints."""
    (workdir / "crash").write_text("1")
    with pytest.raises(JobExecutionError, match="injected crash"):
        build(workdir, out, **kw).execute(name)
    (workdir / "crash").unlink()
    return store().list_checkpoints(name, include_discarded=False)


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def local(storage: Storage, rel: str) -> Path:
    return Path(storage.full_path(rel))


def test_corrupt_latest_checkpoint_falls_back_and_output_stays_exactly_once(workdir, capfd):
    out = workdir / "out"
    retained = crash_run(workdir, "fallback", out)
    storage = job_storage("fallback")
    assert len(retained) == 3
    for c in retained:  # retention never leaves a retained checkpoint pointing at a deleted file
        verify_manifest(storage, c["manifest"])
        assert storage.exists(f"chk-{c['epoch']:010d}/_metadata.json")
    discarded = [c for c in store().list_checkpoints("fallback") if c["discarded"]]
    assert discarded and not any(storage.exists(f"chk-{c['epoch']:010d}") for c in discarded)
    latest, previous = retained[-1], retained[-2]
    only_latest = sorted({h["path"] for hs in latest["manifest"].values() for h in hs}
                         - {h["path"] for hs in previous["manifest"].values() for h in hs})
    flip(local(storage, only_latest[0]))
    capfd.readouterr()

    build(workdir, out).execute("fallback")
    err = capfd.readouterr().err
    assert f"checkpoint {latest['epoch']} cannot be restored" in err and "checksum" in err
    assert Path(only_latest[0]).name in err
    assert f"falls back to checkpoint {previous['epoch']}" in err
    assert published(out) == EXPECTED  # replayed epochs rewrote their files: nothing lost, nothing twice
    assert published(Path(str(out) + "-2")) == EXPECTED
    assert storage.exists(only_latest[0]), "the corrupt file is kept for inspection, not deleted"


def test_missing_file_in_every_retained_checkpoint_refuses_listing_what_was_tried(workdir):
    out = workdir / "out"
    retained = crash_run(workdir, "broken", out)
    storage = job_storage("broken")
    for c in retained:
        victim = local(storage, c["manifest"]["count"][-1]["path"])
        if victim.exists():
            victim.unlink()
    tried = ", ".join(str(c["epoch"]) for c in reversed(retained))
    with pytest.raises(JobExecutionError, match=f"none of its retained checkpoints is intact \\(tried {tried}"):
        build(workdir, out).execute("broken")
    assert len(store().list_checkpoints("broken", include_discarded=False)) == 3, "nothing was dropped"


def test_retained_checkpoint_restores_without_the_metadata_store(workdir):
    """With the metadata store gone, a plain run refuses to start over on top of the retained
    checkpoints (it would write over their restore points) and names the one to restore."""
    out = workdir / "out"
    retained = crash_run(workdir, "selfcontained", out)
    for lost in (workdir / ".keyspan").glob("keyspan.db*"):
        lost.unlink()
    # this process keeps the deleted database open: the next runs get a new, empty store, as after a loss
    run_options.current().metadata_url = f"sqlite:///{workdir / '.keyspan' / 'replacement.db'}"
    storage = job_storage("selfcontained")
    restore_points = {c["epoch"]: local(storage, f"chk-{c['epoch']:010d}/_metadata.json").read_bytes() for c in retained}
    chk = storage.url(f"chk-{retained[-1]['epoch']:010d}")
    with pytest.raises(JobExecutionError, match=f"has no checkpoint of this job, but its checkpoint folder .* holds "
                                                f"{len(retained)} .*restore the newest: keyspan run -s {chk} "):
        build(workdir, out).execute("selfcontained")
    assert {e: local(storage, f"chk-{e:010d}/_metadata.json").read_bytes() for e in restore_points} == restore_points
    run_options.current().savepoint_path = chk
    build(workdir, out).execute("selfcontained")
    assert published(out) == EXPECTED


def test_a_damaged_metadata_store_is_named_with_what_to_do(workdir):
    """A SQLite store with flipped bytes: the run stops before anything starts, naming the store."""
    out = workdir / "out"
    crash_run(workdir, "damaged", out)
    damaged = workdir / "damaged.db"
    data = bytearray((workdir / ".keyspan" / "keyspan.db").read_bytes())
    for at in range(0, 16):  # SQLite's header: "SQLite format 3"
        data[at] ^= 0xFF
    damaged.write_bytes(bytes(data))
    run_options.current().metadata_url = f"sqlite:///{damaged}"
    with pytest.raises(JobExecutionError, match=rf"job 'damaged' cannot start: the metadata store .*{damaged.name}.* "
                                                r"cannot be read \(.*\)\. Restore it from a backup, or move it aside"):
        build(workdir, out).execute("damaged")


def test_changed_job_restores_by_uid_and_deletes_no_checkpoint(workdir, capfd):
    out = workdir / "out"
    retained = crash_run(workdir, "changing", out)
    storage = job_storage("changing")
    files = {h["path"] for c in retained for hs in c["manifest"].values() for h in hs}

    # remove an operator that has state: refused, nothing deleted
    with pytest.raises(JobExecutionError, match="count2.*--allow-non-restored-state"):
        build(workdir, out, second_counter=False, crash_at=-1).execute("changing")
    assert all(storage.exists(p) for p in files)
    assert [c["epoch"] for c in store().list_checkpoints("changing", include_discarded=False)] == \
        [c["epoch"] for c in retained]

    # add an operator and drop the second counter's state on purpose: counts continue by uid
    (workdir / "crash").write_text("1")  # crash again after the restore, so a third change can follow
    run_options.current().allow_non_restored_state = True
    with pytest.raises(JobExecutionError, match="injected crash"):
        build(workdir, out, second_counter=False, extra_filter=True, crash_at=105).execute("changing")
    (workdir / "crash").unlink()
    err = capfd.readouterr().err
    assert "changed since checkpoint" in err and "dropping the state of count2" in err and "added-filter" in err
    run_options.current().allow_non_restored_state = False
    build(workdir, out, second_counter=False, extra_filter=True).execute("changing")
    assert published(out) == EXPECTED  # state restored by uid: the counts went on, none twice
    assert not any(line.startswith("starts from scratch") for line in capfd.readouterr().err.splitlines())


def test_a_state_restored_as_another_kind_is_refused_by_name_and_loses_nothing(workdir):
    """The job changed a value state into a map state under the same name: the restore stops in the
    operator's open() naming the state and both kinds (it was a TypeError deep in the map state); the
    old job then resumes from the same checkpoint with every count intact."""
    out = workdir / "out"
    retained = crash_run(workdir, "rekinded", out, second_counter=False)
    with pytest.raises(JobExecutionError) as err:
        build(workdir, out, second_counter=False, crash_at=-1, counter=CountInAMap).execute("rekinded")
    text = str(err.value)
    assert ("operator 'KeyedProcess' (uid count, subtask" in text and "failed in open()" in text
            and "state 'n' was restored as value state and cannot be used as map state" in text), text
    assert [c["epoch"] for c in store().list_checkpoints("rekinded", include_discarded=False)] == \
        [c["epoch"] for c in retained]
    build(workdir, out, second_counter=False, crash_at=-1).execute("rekinded")
    assert published(out) == EXPECTED


def _evil_state_file(marker: Path) -> bytes:
    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    return statefile.encode({kg: pickle.dumps({"n": ({"k0": Evil()}, [])}) for kg in range(128)})


def test_tampered_savepoint_is_refused_before_anything_is_unpickled(workdir):
    out = workdir / "out"
    retained = crash_run(workdir, "tamper", out)
    storage = job_storage("tamper")
    chk_rel = f"chk-{retained[-1]['epoch']:010d}"
    chk = storage.url(chk_rel)
    meta_path = local(storage, f"{chk_rel}/_metadata.json")
    metadata = json.loads(meta_path.read_text())
    handle = metadata["state"]["count"][0]
    state_path = local(storage, handle["path"])
    marker = workdir / "pwned"
    evil = _evil_state_file(marker)
    run_options.current().savepoint_path = chk

    # 1. a state file replaced, metadata untouched: its checksum does not match
    original = state_path.read_bytes()
    state_path.write_bytes(evil)
    with pytest.raises(JobExecutionError, match=f"{state_path.name}.*corrupt.*checksum"):
        build(workdir, workdir / "never").execute("tamper-restore")
    # 2. the checksum in _metadata.json edited to match: the signature does not
    import hashlib

    handle["sha256"] = hashlib.sha256(evil).hexdigest()
    handle["bytes"] = len(evil)
    meta_path.write_text(json.dumps(metadata))
    with pytest.raises(JobExecutionError, match="does not match its signature.*Nothing was read"):
        build(workdir, workdir / "never").execute("tamper-restore")
    # 3. the signature removed
    del metadata["signature"]
    meta_path.write_text(json.dumps(metadata))
    with pytest.raises(JobExecutionError, match="is not signed"):
        build(workdir, workdir / "never").execute("tamper-restore")
    assert not marker.exists(), "nothing from the tampered savepoint may be unpickled"
    assert not (workdir / "never").exists()
    state_path.write_bytes(original)
