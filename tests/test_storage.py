"""Checkpoint storage on S3, against a real S3-compatible server (moto's standalone server on
loopback): the ``Storage`` operations, ranged reads of state files, a keyspan job whose checkpoints
and FileSink output live in a bucket, and retries when the endpoint fails."""

from __future__ import annotations

import logging
import pickle
import socket
import threading
import uuid
from types import SimpleNamespace

import pytest

from keyspan.checkpoint import statefile
from keyspan.checkpoint.reader import latest_keyed_state
from keyspan.io.storage import Storage, StorageError
from keyspan.common import Encoder
from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.runtime import options as run_options

import boto3  # noqa: E402 — the test extras install moto's server and boto3
import moto.server as moto_server  # noqa: E402

BUCKET = "keyspan-test"
KEY, SECRET, REGION = "testing-key", "testing-secret", "us-east-1"
# botocore retries connection errors itself (5 attempts, ~9 s); let Storage's own retries show
NO_BOTO_RETRIES = {"config_kwargs": {"retries": {"total_max_attempts": 1}}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_moto(port: int):
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


@pytest.fixture(scope="module")
def s3():
    port = _free_port()
    server = _start_moto(port)
    endpoint = f"http://127.0.0.1:{port}"
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_ENDPOINT_URL", endpoint)
        mp.setenv("AWS_ACCESS_KEY_ID", KEY)
        mp.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        mp.setenv("AWS_DEFAULT_REGION", REGION)
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                              region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        try:
            yield SimpleNamespace(
                endpoint=endpoint, port=port, client=client, bucket=BUCKET,
                # what a job passes when its executors' environment does not configure S3
                options={"endpoint_url": endpoint, "key": KEY, "secret": SECRET,
                         "client_kwargs": {"region_name": REGION}},
            )
        finally:
            server.stop()


def _keys(s3, prefix: str) -> list[str]:
    pages = s3.client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _prefix() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def s3_calls(monkeypatch):
    """Record the S3 API calls (method, arguments without the body) a Storage's s3fs makes."""

    def spy(storage: Storage) -> list:
        calls = []
        fs = storage.fs
        original = fs._call_s3

        async def recording(method, *args, **kwargs):
            calls.append((method, {k: v for k, v in kwargs.items() if k != "Body"}))
            return await original(method, *args, **kwargs)

        monkeypatch.setattr(fs, "_call_s3", recording)
        return calls

    return spy


# -- (a) the Storage operations ------------------------------------------------------------------
def test_storage_round_trip_on_s3(s3, s3_calls):
    p = _prefix()
    st = Storage(f"s3://{s3.bucket}/{p}")  # configured by the environment (AWS_ENDPOINT_URL, keys, region)
    calls = s3_calls(st)
    data = bytes(range(256)) * 40
    st.write("dir/a.bin", data)
    assert [m for m, _ in calls] == ["put_object"]  # one PUT, nothing staged or multipart
    assert _keys(s3, p) == [f"{p}/dir/a.bin"]

    del calls[:]
    assert st.read("dir/a.bin") == data
    assert st.read("dir/a.bin", 1000, 123) == data[1000:1123]
    assert st.read("dir/a.bin", len(data) - 10) == data[-10:]
    assert st.read("dir/a.bin", 5, 0) == b""
    ranges = [kw.get("Range") for m, kw in calls if m == "get_object"]
    assert ranges[1:] == ["bytes=1000-1122", f"bytes={len(data) - 10}-"]

    assert st.size("dir/a.bin") == len(data)
    st.write("dir/sub/b", b"bee")
    st.write("top", b"t")
    assert st.exists("dir/a.bin") and st.exists("dir") and st.exists("dir/sub")
    assert not st.exists("dir/missing") and not st.exists("nothing")
    assert st.list() == ["dir", "top"]
    assert st.list("dir") == ["a.bin", "sub"]
    assert st.list("nothing") == []
    with pytest.raises(FileNotFoundError):
        st.read("dir/missing")

    # another process sees what this one wrote after it listed (no stale listing cache)
    assert st.list("dir/sub") == ["b"]
    s3.client.put_object(Bucket=s3.bucket, Key=f"{p}/dir/sub/c", Body=b"sea")
    assert st.list("dir/sub") == ["b", "c"]
    assert st.exists("dir/sub/c") and st.size("dir/sub/c") == 3
    assert st.files_under() == ["dir/a.bin", "dir/sub/b", "dir/sub/c", "top"]  # what a FileSource lists
    assert st.files_under("dir/sub") == ["b", "c"] and st.files_under("nothing") == []

    st.rename("dir/sub/b", "moved/b")
    assert not st.exists("dir/sub/b") and st.read("moved/b") == b"bee"

    backup = Storage(f"s3://{s3.bucket}/{p}-copy")
    st.copy_tree("dir", backup, "snap")
    assert _keys(s3, f"{p}-copy/") == [f"{p}-copy/snap/a.bin", f"{p}-copy/snap/sub/c"]
    assert backup.read("snap/a.bin") == data

    # a recursive delete takes the tree and nothing beside it that merely shares the name's prefix
    st.write("dir-other/x", b"x")
    st.delete("dir", recursive=True)
    assert not st.exists("dir") and st.list() == ["dir-other", "moved", "top"]
    st.delete("dir", recursive=True)  # deleting what is gone is a no-op
    st.delete("top")
    assert st.list() == ["dir-other", "moved"]

    # the job's root: delete("") empties it and leaves the bucket (and its other prefixes) alone
    st.delete("", recursive=True)
    assert _keys(s3, p + "/") == [] and _keys(s3, f"{p}-copy/")
    assert st.list() == []


def test_delete_files_deletes_the_named_files_in_one_request_on_s3(s3, s3_calls, tmp_path):
    """Retention deletes a few state files every epoch: one multi-object delete on S3, no lookups;
    files already gone are skipped, and nothing else goes (local storage alike)."""
    p = _prefix()
    for st in (Storage(f"s3://{s3.bucket}/{p}"), Storage(f"file://{tmp_path}")):
        for name in ("state/a/1", "state/a/2", "state/b/3", "state/a/10"):
            st.write(name, b"x")
        calls = s3_calls(st) if st.is_object_store else []
        st.delete_files({"state/a/1", "state/b/3", "state/a/gone"})
        assert [m for m, _ in calls] == (["delete_objects"] if st.is_object_store else [])
        del calls[:]
        st.delete_files([])  # nothing to delete: no request
        assert calls == []
        assert st.list("state/a") == ["10", "2"] and st.list("state/b") == []


def test_storage_options_survive_pickling_without_environment(s3, monkeypatch):
    p = _prefix()
    st = Storage(f"s3://{s3.bucket}/{p}", s3.options).child("job")
    clone = pickle.loads(pickle.dumps(st))
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    clone.write("f", b"shipped")
    assert clone.uri == f"s3://{s3.bucket}/{p}/job" and clone.storage_options == s3.options
    assert (clone.attempts, clone.backoff, clone.max_backoff) == (st.attempts, st.backoff, st.max_backoff)
    assert _keys(s3, p) == [f"{p}/job/f"]


def test_bucket_root_delete_keeps_bucket(s3):
    s3.client.create_bucket(Bucket="keyspan-root")
    st = Storage("s3://keyspan-root")
    st.write("a/b", b"1")
    st.write("c", b"2")
    assert st.list() == ["a", "c"]
    st.delete("", recursive=True)
    assert st.list() == []
    assert "keyspan-root" in [b["Name"] for b in s3.client.list_buckets()["Buckets"]]


# -- (b) state files: only the wanted key groups' bytes are read ----------------------------------
def test_statefile_reads_only_requested_span_on_s3(s3, s3_calls):
    p = _prefix()
    st = Storage(f"s3://{s3.bucket}/{p}")
    sections = {kg: bytes([kg % 251]) * (500 + kg) for kg in range(128)}
    handle = statefile.write(st, "state/op/e0000000001-s0000-tok.full", sections)
    assert _keys(s3, p) == [f"{p}/state/op/e0000000001-s0000-tok.full"]
    assert st.size(handle["path"]) == handle["bytes"]

    calls = s3_calls(st)
    stats = statefile.ReadStats()
    got = dict(statefile.read_key_groups(st, handle["path"], range(40, 48), stats))
    assert got == {kg: sections[kg] for kg in range(40, 48)}
    span = sum(len(sections[kg]) for kg in range(40, 48))
    ranges = [kw["Range"] for m, kw in calls if m == "get_object"]
    assert len(ranges) == 3 and all(r.startswith("bytes=") for r in ranges)  # tail, footer, span: never the whole file
    fetched = sum(int(r[6:].split("-")[1]) - int(r[6:].split("-")[0]) + 1 for r in ranges)
    assert fetched == stats.bytes_read
    footer_and_tail = stats.bytes_read - span
    assert 0 < footer_and_tail < handle["bytes"] - sum(map(len, sections.values()))
    assert stats.bytes_read < handle["bytes"] / 4 and stats.files == 1

    # a key-group range the file does not hold reads the footer only
    stats = statefile.ReadStats()
    assert list(statefile.read_key_groups(st, handle["path"], range(500, 600), stats)) == []
    assert stats.bytes_read == footer_and_tail


# -- (c) a job whose checkpoints live in the bucket ------------------------------------------------
class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        yield ctx.get_current_key(), total


def _reference(data):
    totals, emitted = {}, []
    for k, v in data:
        totals[k] = totals.get(k, 0) + v
        emitted.append((k, totals[k]))
    return totals, emitted


def test_job_checkpoints_to_s3_and_state_reads_back(env, s3):
    p = _prefix()
    root = f"s3://{s3.bucket}/{p}/ckpts"
    config = env.get_checkpoint_config()
    config.set_checkpoint_storage_dir(root)
    # Spark's Python workers may have been started before this module set AWS_* in the environment
    config.set_checkpoint_storage_options(s3.options)
    env.set_max_records_per_epoch(8)
    data = [(f"k{i % 5}", i) for i in range(32)]  # four epochs
    result = (env.from_collection(data).uid("numbers")
              .key_by(lambda r: r[0])
              .process(RunningSum()).uid("sum")
              .execute_and_collect("s3-sum", limit=1000))
    totals, emitted = _reference(data)
    assert sorted(result) == sorted(emitted)

    keys = _keys(s3, f"{p}/ckpts/s3-sum/")
    state_files = [k for k in keys if k.startswith(f"{p}/ckpts/s3-sum/state/sum/")]
    assert state_files, keys
    assert any(k.startswith(f"{p}/ckpts/s3-sum/sources/") for k in keys)
    assert all(k.endswith((".full", ".delta")) for k in state_files)

    # read the committed state back from S3 (configured by this process's environment)
    state = latest_keyed_state(run_options.current().metadata(), root, "s3-sum", "sum")
    assert state == {"total": totals}


# -- (d) FileSink on S3: published only after commit, nothing left staged --------------------------
def test_file_sink_job_publishes_to_s3(env, s3):
    p = _prefix()
    base = f"s3://{s3.bucket}/{p}/out"
    env.set_max_records_per_epoch(10)
    data = [(f"k{i % 4}", i) for i in range(30)]
    sink = (FileSink.for_row_format(base, Encoder.simple_string_encoder())
            .with_storage_options(s3.options).build())
    (env.from_collection(data).uid("numbers")
        .key_by(lambda r: r[0])
        .process(RunningSum()).uid("sum")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink).uid("out"))
    env.execute("s3-sink")

    keys = _keys(s3, f"{p}/out/")
    assert keys and not [k for k in keys if "/.staging/" in k], keys
    assert all(k.rsplit("/", 1)[1].startswith("part-") for k in keys)
    lines = []
    for k in keys:
        lines += s3.client.get_object(Bucket=s3.bucket, Key=k)["Body"].read().decode().splitlines()
    _, emitted = _reference(data)
    assert sorted(lines) == sorted(f"{k},{v}" for k, v in emitted)
    assert Storage(base).list(".staging") == []


def test_compacting_file_sink_on_s3(env, s3):
    """Compaction on an object store (renames are copies and deletes): the part files end up joined,
    nothing is left staged or waiting, and every record is in the compacted files once."""
    from keyspan.datastream.connectors.file_system import FileCompactor, FileCompactStrategy

    base = f"s3://{s3.bucket}/{_prefix()}/out"
    env.set_max_records_per_epoch(10)
    sink = FileSink.for_row_format(base, Encoder.simple_string_encoder()).with_storage_options(s3.options) \
        .enable_compact(FileCompactStrategy.builder().enable_compaction_on_checkpoint(2).build(),
                        FileCompactor.concat_file_compactor()).build()
    env.from_collection([f"line {i}" for i in range(50)]).sink_to(sink)
    env.execute("s3-compacting-sink")
    storage = Storage(base, s3.options)
    visible = [f for f in storage.files_under() if not f.startswith(".")]
    assert visible and all(f.startswith("compacted-part-") for f in visible), visible
    assert storage.list(".staging") == [] and storage.list(".compaction") == ["state.json"]
    lines = [line for f in visible for line in storage.read(f).decode().splitlines()]
    assert sorted(lines) == sorted(f"line {i}" for i in range(50))


def test_file_sink_two_phases_and_republish_after_crash_on_s3(s3):
    p = _prefix()
    sink = FileSink.for_row_format(f"s3://{s3.bucket}/{p}", Encoder.simple_string_encoder()).build()
    writer = sink.create_writer(1, 7, "tok")
    writer.write("a")
    writer.write("b")
    [handle] = writer.finish()
    # staged only: nothing visible under a final name before the checkpoint commits
    assert _keys(s3, p + "/") == [f"{p}/.staging/e0000000007-s0001-tok"]
    assert Storage(f"s3://{s3.bucket}/{p}").list() == [".staging"]

    # the driver crashed between the copy and the delete of the rename: both exist
    st = sink.storage()
    st.fs.copy(st.full_path(handle["staged"]), st.full_path(handle["final"]))
    assert len(_keys(s3, p + "/")) == 2
    sink.publish([handle])  # published again on restart
    assert _keys(s3, p + "/") == [f"{p}/part-0000000007-0001"]
    assert st.read(handle["final"]) == b"a\nb\n"
    sink.publish([handle])  # and again: idempotent
    assert _keys(s3, p + "/") == [f"{p}/part-0000000007-0001"]

    # a discarded (uncommitted) epoch leaves nothing
    other = sink.create_writer(0, 8, "tok2")
    other.write("z")
    sink.discard(other.finish())
    assert _keys(s3, p + "/") == [f"{p}/part-0000000007-0001"]


# -- (e) retries -----------------------------------------------------------------------------------
class _StartOnRetry(logging.Handler):
    """Starts a server the first time Storage logs a retry of ``op``: the endpoint is down for the
    first attempt, whatever the machine's load, and comes up while Storage backs off."""

    def __init__(self, op: str, start):
        super().__init__(logging.WARNING)
        self.op, self.start, self.seen = op, start, []
        self.thread: threading.Thread | None = None

    def emit(self, record):
        message = record.getMessage()
        if message.startswith(self.op + " of "):
            self.seen.append(message)
            if self.thread is None:
                self.thread = threading.Thread(target=self.start, daemon=True)
                self.thread.start()


def test_write_and_read_retry_until_endpoint_comes_up(s3):
    """A port that starts accepting after a delay: a second moto server (same in-process backend,
    so the same bucket) comes up on it while the operation is being retried."""
    p = _prefix()
    port = _free_port()
    options = {**s3.options, "endpoint_url": f"http://127.0.0.1:{port}", **NO_BOTO_RETRIES}
    st = Storage(f"s3://{s3.bucket}/{p}", options, attempts=8, backoff=0.1, max_backoff=1.0)
    logger = logging.getLogger("keyspan.io.storage")
    servers = []

    def start():
        servers.append(_start_moto(port))

    try:
        handler = _StartOnRetry("write", start)
        logger.addHandler(handler)
        try:
            st.write("ckpt.full", b"state bytes")
        finally:
            logger.removeHandler(handler)
        assert handler.seen and f"s3://{s3.bucket}/{p}/ckpt.full" in handler.seen[0]
        assert _keys(s3, p) == [f"{p}/ckpt.full"]  # through the main server: the same bucket

        servers.pop().stop()
        handler = _StartOnRetry("read", start)
        logger.addHandler(handler)
        try:
            assert st.read("ckpt.full", 6, 5) == b"bytes"
        finally:
            logger.removeHandler(handler)
        assert handler.seen
    finally:
        for server in servers:
            server.stop()


def test_permanent_failure_names_the_file(s3, caplog):
    dead = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    st = Storage(f"s3://{s3.bucket}/ckpts/job", {**s3.options, "endpoint_url": dead, **NO_BOTO_RETRIES},
                 attempts=3, backoff=0.01)
    caplog.set_level(logging.WARNING, logger="keyspan.io.storage")
    url = f"s3://{s3.bucket}/ckpts/job/state/op/e0000000003-s0001-abc.full"
    with pytest.raises(StorageError, match="write of " + url + " failed after 3 attempt") as info:
        statefile.write(st, "state/op/e0000000003-s0001-abc.full", {0: b"x"})
    assert info.value.url == url and info.value.__cause__ is not None
    assert len([r for r in caplog.records if "retrying" in r.getMessage()]) == 2
    with pytest.raises(StorageError, match="read of " + url):
        st.read("state/op/e0000000003-s0001-abc.full", 0, 4)


def test_permanent_errors_are_not_retried(s3, caplog):
    st = Storage(f"s3://{s3.bucket}/{_prefix()}", attempts=5, backoff=0.5)
    caplog.set_level(logging.WARNING, logger="keyspan.io.storage")
    with pytest.raises(FileNotFoundError):
        st.read("missing.full")
    with pytest.raises(FileNotFoundError):
        st.size("missing.full")
    assert not [r for r in caplog.records if "retrying" in r.getMessage()]


def test_local_storage_retries_too(tmp_path, monkeypatch):
    st = Storage(str(tmp_path / "ckpts"), attempts=3, backoff=0.0)
    real_open = open
    failures = []

    def flaky_open(path, mode="r", *args, **kwargs):
        if "w" in mode and str(path).startswith(str(tmp_path)) and len(failures) < 2:
            failures.append(path)
            raise ConnectionResetError("NFS went away")
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr("builtins.open", flaky_open)
    st.write("a/b", b"data")
    assert len(failures) == 2 and st.read("a/b") == b"data"
    assert not [p for p in (tmp_path / "ckpts" / "a").iterdir() if ".tmp-" in p.name]


# -- (f) streamed writes and chunked reads: a state file is never held whole ------------------------
def _pieces(n: int, size: int, fail_after: int | None = None):
    for i in range(n):
        if fail_after is not None and i == fail_after:
            raise ConnectionResetError("the source went away mid-stream")
        yield bytes([i % 251]) * size


def test_streamed_write_is_atomic_on_local_storage(tmp_path, monkeypatch):
    monkeypatch.setattr("keyspan.io.storage.STREAM_CHUNK", 10_000)
    st = Storage(str(tmp_path / "ckpts"), attempts=3, backoff=0.0)
    expected = b"".join(_pieces(40, 1000))
    st.write_stream("a/small", _pieces(3, 1000))  # under the chunk: one plain write
    assert st.read("a/small") == b"".join(_pieces(3, 1000))
    st.write_stream("a/big", _pieces(40, 1000))
    assert st.read("a/big") == expected
    assert b"".join(st.iter_read("a/big", 7_000)) == expected
    assert [len(p) for p in st.iter_read("a/big", 15_000)] == [15_000, 15_000, 10_000]

    # a stream that fails midway leaves no file and no temporary file, and (not replayable) is tried once
    with pytest.raises(StorageError, match="failed after 1 attempt"):
        st.write_stream("a/broken", _pieces(40, 1000, fail_after=20))
    # replayable: tried again with the pieces afresh
    attempts = []

    def replay():
        attempts.append(1)
        return _pieces(40, 1000)

    st.write_stream("a/retried", _pieces(40, 1000, fail_after=30), replay=replay)
    assert attempts == [1] and st.read("a/retried") == expected
    # over an existing file, a failed stream keeps the old one whole
    with pytest.raises(StorageError):
        st.write_stream("a/big", _pieces(40, 1000, fail_after=39))
    assert st.read("a/big") == expected
    assert sorted(p.name for p in (tmp_path / "ckpts" / "a").iterdir()) == ["big", "retried", "small"]


def test_statefile_streams_sections_and_reads_them_in_bounded_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr("keyspan.io.storage.STREAM_CHUNK", 10_000)
    st = Storage(str(tmp_path))
    sections = {kg: bytes([kg]) * (1000 + 37 * kg) for kg in range(64)}
    produced = []

    def pairs():  # an iterable of (key group, payload), one at a time
        for kg in sorted(sections):
            produced.append(kg)
            yield kg, sections[kg]

    h = statefile.write(st, "f.full", pairs())
    assert h == statefile.write(st, "g.full", sections) | {"path": "f.full"}  # same bytes as from a dict
    assert produced == sorted(sections)
    statefile.verify(st, "f.full", h["sha256"])
    reads = []
    real_read = Storage.read

    def counting_read(self, rel, offset=0, length=None):
        reads.append(length)
        return real_read(self, rel, offset, length)

    monkeypatch.setattr(Storage, "read", counting_read)
    stats = statefile.ReadStats()
    got = dict(statefile.read_key_groups(st, "f.full", range(8, 40), stats, chunk=12_000))
    assert got == {kg: sections[kg] for kg in range(8, 40)}
    span_reads = reads[2:]  # after tail and footer
    assert len(span_reads) > 1 and max(span_reads) <= max(12_000, max(map(len, sections.values())))
    assert sum(span_reads) == sum(len(sections[kg]) for kg in range(8, 40))
    assert stats.bytes_read == sum(reads)
    monkeypatch.setattr(Storage, "read", real_read)
    with pytest.raises(ValueError, match="ascending key-group order"):
        statefile.write(st, "h.full", [(3, b"x"), (2, b"y")])
    assert not st.exists("h.full")


def test_streamed_write_on_s3_is_a_multipart_upload_published_whole(s3, s3_calls, monkeypatch):
    part = 5 * 2**20  # S3's smallest multipart part
    monkeypatch.setattr("keyspan.io.storage.STREAM_CHUNK", part)
    p = _prefix()
    st = Storage(f"s3://{s3.bucket}/{p}")
    calls = s3_calls(st)
    sections = {kg: bytes([kg]) * (2**20 + kg) for kg in range(12)}  # ~12 MB: over two parts
    h = statefile.write(st, "state/op/e1.full", sections)
    methods = [m for m, _ in calls]
    assert "create_multipart_upload" in methods and "complete_multipart_upload" in methods
    assert "put_object" not in methods
    assert _keys(s3, p) == [f"{p}/state/op/e1.full"] and st.size("state/op/e1.full") == h["bytes"]
    statefile.verify(st, "state/op/e1.full", h["sha256"])
    assert dict(statefile.read_key_groups(st, "state/op/e1.full", range(3, 7))) == {
        kg: sections[kg] for kg in range(3, 7)}

    # a stream that fails before it is complete publishes nothing
    del calls[:]
    with pytest.raises(ConnectionResetError):
        st.write_stream("state/op/e2.full", _pieces(20, 2**20, fail_after=12))
    assert _keys(s3, p) == [f"{p}/state/op/e1.full"] and not calls

    # a savepoint-style copy to another prefix goes piece by piece too
    other = Storage(f"s3://{s3.bucket}/{p}-copy")
    st.copy_file("state/op/e1.full", other, "sp/e1.full")
    statefile.verify(other, "sp/e1.full", h["sha256"])


def test_a_missing_bucket_is_named_before_the_job_starts(s3, tmp_path):
    """``keyspan run`` with checkpoints in a bucket that does not exist stops at its first write with
    the storage's URL and what to check, not with s3fs's error at the job file's last line."""
    import os
    import subprocess
    import sys

    job = os.path.join(os.path.dirname(__file__), "jobs", "counting_job.py")
    run = subprocess.run(
        [sys.executable, "-m", "keyspan", "run", job, "--workdir", str(tmp_path / "work"),
         "--checkpoint-dir", "s3://no-such-bucket/checkpoints", "--no-progress"],
        env={**os.environ, "COUNTING_JOB_OUTPUT": str(tmp_path / "out")}, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1
    assert ("job 'counting' cannot write to its checkpoint storage s3://no-such-bucket/checkpoints/counting "
            "(FileNotFoundError:" in run.stderr), run.stderr
    assert "Check that the bucket or folder exists" in run.stderr and "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()
