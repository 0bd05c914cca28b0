"""Checkpoint storage addressed by URI (file://, s3://, hdfs://, memory://) through fsspec.

Remote file systems are configured the standard way: ``storage_options`` are passed to the fsspec
file system (for ``s3://``: s3fs's ``key``, ``secret``, ``endpoint_url``, ``client_kwargs``,
``config_kwargs``, ...), and whatever they leave out comes from the environment of the process that
does the I/O (for S3: ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION``, ``AWS_PROFILE``, ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3``, instance
roles, ...). A ``Storage`` is pickled into Spark tasks with its URI, ``storage_options`` and retry
settings; environment variables are read where the I/O happens, never shipped.

Every operation is retried on transient errors (connection refused or reset, timeouts, 5xx
responses) with exponential backoff; once the attempts are spent the error propagates as a
``StorageError`` naming the file's URL. Permanent errors (a missing file, access denied, an invalid
request) are raised at once, as the file system raised them.
"""

from __future__ import annotations

import copy
import errno
import logging
import os
import posixpath
import random
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import fsspec

log = logging.getLogger(__name__)

# file systems without a rename: a "move" is a server-side copy followed by a delete, and a PUT
# publishes a whole object at once (so writes need no temporary file)
OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss", "r2"})

_PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
_PERMANENT_ERRNOS = frozenset({errno.EINVAL, errno.EPERM, errno.EACCES, errno.ENOENT, errno.EEXIST, errno.EISDIR,
                               errno.ENOTDIR, errno.ENAMETOOLONG, errno.EMSGSIZE, errno.ENOTEMPTY, errno.EROFS,
                               errno.ENOSPC, errno.EDQUOT})
# botocore / aiohttp errors (by class name, so neither has to be installed) that mean "try again"
_TRANSIENT_NAMES = {
    "botocore": {"ConnectionError", "HTTPClientError", "IncompleteReadError", "ResponseStreamingError",
                 "ConnectionClosedError", "ReadTimeoutError", "ConnectTimeoutError", "EndpointConnectionError"},
    "aiohttp": {"ClientError"},
    "urllib3": {"HTTPError"},
    "requests": {"ConnectionError", "Timeout"},
}
_THROTTLING_CODES = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
                     "InternalError", "ServiceUnavailable", "RequestLimitExceeded"}


# streamed files are uploaded in one PUT up to this size, in multipart parts of this size above it
# (see write_with); iter_read and copy_file move files in pieces of this size
STREAM_CHUNK = 8 << 20
SYNC_THREADS = 8  # files fsynced at once by ``sync_files``


def safe_name(name: str) -> str:
    """A user's name (an operator uid, a transactional id) as one folder name."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


class StorageError(IOError):
    """An operation on a storage file failed after every attempt; the message names the file's URL
    (also in ``.url``) and the cause is the last error."""


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the operation that raised ``exc`` might succeed."""
    if isinstance(exc, _PERMANENT_OS_ERRORS):
        return False
    if isinstance(exc, OSError):  # includes ConnectionError, TimeoutError (and asyncio's, fsspec's FSTimeoutError)
        return exc.errno not in _PERMANENT_ERRNOS
    response = getattr(exc, "response", None)  # botocore ClientError not translated by the file system
    if isinstance(response, dict):
        status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 0
        code = (response.get("Error") or {}).get("Code")
        return status >= 500 or status == 429 or code in _THROTTLING_CODES
    for cls in type(exc).__mro__:
        names = _TRANSIENT_NAMES.get(cls.__module__.split(".", 1)[0])
        if names and cls.__name__ in names:
            return True
    return False


def _env_s3_endpoint() -> str | None:
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() in ("1", "true"):
        return None
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")


class Storage:
    """A directory tree under a root URI. Writes are atomic: a reader sees a whole file or none.

    ``attempts`` (>= 1) is how many times an operation is tried; between attempts it waits
    ``backoff`` seconds, doubling each time, at most ``max_backoff`` (with ±20 % jitter)."""

    def __init__(self, uri: str, storage_options: dict | None = None, *, attempts: int = 3, backoff: float = 0.2,
                 max_backoff: float = 5.0):
        if "://" not in uri:
            uri = "file://" + os.path.abspath(uri)
        if attempts < 1:
            raise ValueError("storage attempts must be >= 1")
        if backoff < 0 or max_backoff < 0:
            raise ValueError("storage backoff must be >= 0 seconds")
        self.uri = uri.rstrip("/")
        self.protocol = self.uri.split("://", 1)[0].lower()
        self.storage_options = dict(storage_options or {})
        self.attempts = int(attempts)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self._fs = None
        self._root = None

    def __getstate__(self):
        return {"uri": self.uri, "storage_options": self.storage_options, "attempts": self.attempts,
                "backoff": self.backoff, "max_backoff": self.max_backoff}

    def __setstate__(self, state):
        self.__init__(state["uri"], state["storage_options"], attempts=state.get("attempts", 3),
                      backoff=state.get("backoff", 0.2), max_backoff=state.get("max_backoff", 5.0))

    def __repr__(self) -> str:
        return f"Storage({self.uri!r})"

    def _fs_options(self) -> dict:
        # a copy: botocore rewrites the config dicts it is given, and fsspec caches file systems
        # by their options
        options = copy.deepcopy(self.storage_options)
        if self.protocol in ("s3", "s3a"):
            client_kwargs = options.get("client_kwargs") or {}
            endpoint = _env_s3_endpoint()
            if endpoint and not options.get("endpoint_url") and not client_kwargs.get("endpoint_url"):
                # recent botocore honours AWS_ENDPOINT_URL itself; older ones (and so s3fs) do not
                options["client_kwargs"] = {**client_kwargs, "endpoint_url": endpoint}
        return options

    def _resolve(self):
        if self._fs is None:
            fs, root = fsspec.core.url_to_fs(self.uri, **self._fs_options())
            self._root = root.rstrip("/") or root
            self._fs = fs
        return self._fs, self._root

    @property
    def fs(self):
        return self._resolve()[0]

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def is_object_store(self) -> bool:
        return self.protocol in OBJECT_STORES

    def full_path(self, rel: str) -> str:
        root = self._resolve()[1]
        rel = rel.strip("/")
        return posixpath.join(root, rel) if rel else root

    def url(self, rel: str) -> str:
        rel = rel.strip("/")
        return self.uri + "/" + rel if rel else self.uri

    def _same_options(self, uri: str) -> "Storage":
        return Storage(uri, self.storage_options, attempts=self.attempts, backoff=self.backoff,
                       max_backoff=self.max_backoff)

    def child(self, rel: str) -> "Storage":
        return self._same_options(self.url(rel))

    def at(self, uri: str) -> "Storage":
        """Another location on the same kind of storage, with this one's options and retries."""
        return self._same_options(uri)

    # -- retries ---------------------------------------------------------------------------------
    def _io(self, op: str, rel: str, fn, attempts: int | None = None):
        """Run ``fn(attempt)`` until it succeeds, a permanent error occurs, or the attempts are spent."""
        attempts = self.attempts if attempts is None else attempts
        for attempt in range(1, attempts + 1):
            try:
                return fn(attempt)
            except Exception as exc:  # noqa: BLE001 — classified below
                if not is_transient(exc):
                    if hasattr(exc, "add_note"):
                        exc.add_note(f"keyspan storage: {op} of {self.url(rel)}")
                    raise
                if attempt == attempts:
                    err = StorageError(f"{op} of {self.url(rel)} failed after {attempt} attempt(s): "
                                       f"{type(exc).__name__}: {exc}")
                    err.url = self.url(rel)
                    raise err from exc
                delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
                log.warning("%s of %s failed (attempt %d of %d: %s: %s); retrying in %.2f s", op, self.url(rel),
                            attempt, attempts, type(exc).__name__, exc, delay)
                time.sleep(delay)

    def _fresh(self, fs, path: str) -> None:
        """Forget cached listings: other processes (Spark tasks, the driver) change remote trees."""
        if not self.is_local:
            fs.invalidate_cache(path)

    @staticmethod
    def _exists(fs, path: str) -> bool:
        # not fs.exists: fsspec's generic one answers False on any error, a connection error included
        try:
            fs.info(path)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    # -- operations ------------------------------------------------------------------------------
    def write(self, rel: str, data: bytes, sync: bool = True) -> None:
        """``data`` as the file ``rel``, atomically (``sync``: as in ``write_with``)."""
        def op(_attempt):
            fs, _ = self._resolve()
            target = self.full_path(rel)
            if self.is_local:
                self._write_local(rel, lambda f: f.write(data), sync)
            else:  # one PUT: an object store publishes the whole object at once
                fs.pipe_file(target, data)

        self._io("write", rel, op)

    def write_with(self, rel: str, produce, retry: bool = True, sync: bool = True) -> None:
        """Write a file atomically by calling ``produce(f)``, which writes its bytes into the binary
        file ``f`` as it makes them: nothing of the file has to be in memory at once, and a reader
        sees the whole file or nothing, as with ``write``.

        On a local file system ``f`` is a temporary file beside the target, fsynced (unless ``sync``
        is False: then whoever relies on the file surviving a machine crash calls ``sync_files``
        first) and renamed over it; a transient error runs ``produce`` again on a fresh temporary
        file (``retry``: only when ``produce`` can run twice). Elsewhere ``f`` is a local temporary
        file that is then uploaded, with retries (it can be read again): up to ``STREAM_CHUNK``
        bytes in one write (one PUT); larger, with s3fs, as a multipart upload in ``STREAM_CHUNK``
        parts that S3 publishes only when it completes (an incomplete one is aborted); on other file
        systems (hdfs, memory) to a temporary name that is then renamed. An exception from
        ``produce`` leaves nothing behind."""
        if self.is_local:
            self._io("write", rel, lambda _attempt: self._write_local(rel, produce, sync),
                     attempts=None if retry else 1)
            return
        fd, spool = tempfile.mkstemp(prefix="keyspan-upload-")
        try:
            with os.fdopen(fd, "wb") as f:
                produce(f)
            size = os.path.getsize(spool)
            if size <= STREAM_CHUNK:
                with open(spool, "rb") as f:
                    data = f.read()
                os.unlink(spool)
                self.write(rel, data)
                return

            def upload(_attempt):
                fs, _ = self._resolve()
                target = self.full_path(rel)
                if self.is_object_store:
                    if self.protocol in ("s3", "s3a"):
                        fs.put_file(spool, target, chunksize=STREAM_CHUNK)
                    else:
                        fs.put_file(spool, target)
                else:
                    tmp = f"{target}.tmp-{uuid.uuid4().hex}"
                    try:
                        fs.put_file(spool, tmp)
                        fs.mv(tmp, target)
                    except BaseException:
                        try:
                            fs.rm(tmp)
                        except Exception:  # noqa: BLE001 — best effort
                            pass
                        raise
                self._fresh(fs, target)

            self._io("write", rel, upload)
        finally:
            try:
                os.unlink(spool)
            except OSError:
                pass

    def write_stream(self, rel: str, chunks, replay=None) -> None:
        """Write the concatenation of ``chunks`` (bytes-like pieces, consumed once) atomically
        through ``write_with``, holding one piece at a time. ``replay``, when given, returns the same
        pieces afresh, so a local write that fails with a transient error can be tried again."""
        first = [chunks]

        def produce(f):
            pieces = first.pop() if first else replay()
            for chunk in pieces:
                f.write(chunk)
                del chunk  # not kept while the next piece is made

        self.write_with(rel, produce, retry=replay is not None)

    def _write_local(self, rel: str, produce, sync: bool = True) -> None:
        target = self.full_path(rel)
        os.makedirs(posixpath.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                produce(f)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def sync_files(self, rels) -> None:
        """Make files written with ``write_with(..., sync=False)`` survive a machine crash: on a local
        file system each one's data is fsynced, from whichever process wrote it (elsewhere a file is
        durable once written)."""
        if not self.is_local or not rels:
            return

        def sync(rel):
            def op(_attempt):
                fd = os.open(self.full_path(rel), os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            # once: after a failed fsync Linux reports the lost writes to no later one
            self._io("sync", rel, op, attempts=1)

        if len(rels) == 1:
            sync(rels[0])
            return
        with ThreadPoolExecutor(min(len(rels), SYNC_THREADS)) as pool:  # the disk flushes them together
            list(pool.map(sync, rels))

    def iter_read(self, rel: str, chunk_size: int = STREAM_CHUNK, offset: int = 0, length: int | None = None):
        """The file's bytes (or ``length`` bytes from ``offset``) in pieces of ``chunk_size``, one
        ranged read each (each with retries): a large file is never held whole."""
        end = self.size(rel) if length is None else offset + length
        pos = offset
        while pos < end:
            n = min(chunk_size, end - pos)
            data = self.read(rel, pos, n)
            if not data:
                raise StorageError(f"read of {self.url(rel)} ended at byte {pos} of {end}")
            yield data
            pos += len(data)

    def copy_file(self, src_rel: str, dest: "Storage", dest_rel: str) -> None:
        """Copy one file to ``dest_rel`` on ``dest`` (any storage) in pieces, atomically on the destination."""
        dest.write_stream(dest_rel, self.iter_read(src_rel), replay=lambda: self.iter_read(src_rel))

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        """The file's bytes, or ``length`` bytes from ``offset`` (one ranged GET on an object store)."""
        if length is not None and length <= 0:
            return b""

        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel)
            if offset == 0 and length is None:
                return fs.cat_file(path)
            end = None if length is None else offset + length
            return fs.cat_file(path, start=offset, end=end)

        return self._io("read", rel, op)

    def size(self, rel: str) -> int:
        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel)
            self._fresh(fs, path)
            return fs.size(path)

        return self._io("size", rel, op)

    def exists(self, rel: str) -> bool:
        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel)
            self._fresh(fs, path)
            return self._exists(fs, path)

        return self._io("exists", rel, op)

    def delete(self, rel: str, recursive: bool = False) -> None:
        """Delete a file (or, with ``recursive``, a tree); deleting what does not exist is a no-op.
        On an object store the bucket itself is never deleted, only what it holds."""

        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel)
            self._fresh(fs, path)
            if not self._exists(fs, path):
                return
            targets = [path]
            if self.is_object_store and "/" not in path.strip("/"):  # a bucket: empty it, keep it
                if not recursive:
                    return
                targets = fs.ls(path, detail=False)
            for target in targets:
                try:
                    fs.rm(target, recursive=recursive)
                except FileNotFoundError:
                    pass
            self._fresh(fs, path)

        self._io("delete", rel, op)

    def delete_files(self, rels) -> None:
        """Delete files, skipping those already gone, without looking each one up first: an object
        store deletes them in one request per 1,000 (retention deletes a few files every epoch)."""
        rels = sorted(rels)
        if not rels:
            return

        def op(_attempt):
            fs, _ = self._resolve()
            paths = [self.full_path(rel) for rel in rels]
            if self.is_object_store:
                fs.rm(paths)  # one multi-object delete; keys already gone are no error
            else:
                for path in paths:
                    try:
                        fs.rm_file(path)
                    except FileNotFoundError:
                        pass
            for parent in {posixpath.dirname(path) for path in paths}:
                self._fresh(fs, parent)

        self._io("delete", rels[0] if len(rels) == 1 else f"{rels[0]} and {len(rels) - 1} more", op)

    def list(self, rel: str = "") -> list[str]:
        """Names directly under ``rel`` (empty when it does not exist)."""

        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel)
            self._fresh(fs, path)
            try:
                entries = fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
            here = path.rstrip("/")
            # an object store may list a "directory marker" object (key ending in /) as the prefix itself
            names = {posixpath.basename(p.rstrip("/")) for p in entries
                     if not (p.endswith("/") and p.rstrip("/") == here)}
            return sorted(n for n in names if n)

        return self._io("list", rel, op)

    def files_under(self, rel: str = "") -> list[str]:
        """Every file under ``rel``, in its subfolders too, as paths relative to ``rel`` (sorted)."""

        def op(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(rel).rstrip("/")
            self._fresh(fs, path)
            try:
                found = fs.find(path, withdirs=False, detail=False)
            except FileNotFoundError:
                return []
            prefix = path + "/"
            return sorted(p[len(prefix):] for p in found if p.startswith(prefix))

        return self._io("list", rel, op)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing it. Atomic on local files; on an object store a
        server-side copy and then a delete of ``src`` — repeating a rename that was interrupted
        between the two (both exist) finishes it with one ``dst`` and no ``src``."""

        def op(attempt):
            fs, _ = self._resolve()
            source, target = self.full_path(src), self.full_path(dst)
            if self.is_local:
                os.makedirs(posixpath.dirname(target), exist_ok=True)
                if attempt > 1 and not os.path.exists(source) and os.path.exists(target):
                    return  # an earlier attempt moved it before failing to report so
                os.replace(source, target)
                return
            self._fresh(fs, source)
            self._fresh(fs, target)
            if attempt > 1 and not self._exists(fs, source) and self._exists(fs, target):
                return  # an earlier attempt copied and deleted before failing to report so
            if self.is_object_store:
                fs.copy(source, target)
                try:
                    fs.rm(source)
                except FileNotFoundError:
                    pass
            else:
                fs.mv(source, target)
            self._fresh(fs, source)
            self._fresh(fs, target)

        self._io("rename", src, op)

    def copy_tree(self, src_rel: str, dest: "Storage", dest_rel: str) -> None:
        """Copy every file under ``src_rel`` (or the file ``src_rel``) to ``dest_rel`` on ``dest``,
        keeping relative paths. Each file is copied in pieces (``copy_file``), with retries."""

        def find(_attempt):
            fs, _ = self._resolve()
            path = self.full_path(src_rel)
            self._fresh(fs, path)
            if not self._exists(fs, path):
                return path, []
            return path, sorted(fs.find(path, withdirs=False))

        src, files = self._io("list", src_rel, find)
        prefix = src.rstrip("/") + "/"
        for f in files:
            if f.endswith("/"):
                continue  # a directory marker object
            if f.rstrip("/") == src.rstrip("/"):
                sub = ""
            elif f.startswith(prefix):
                sub = f[len(prefix):]
            else:
                continue
            s = posixpath.join(src_rel, sub) if sub else src_rel
            d = posixpath.join(dest_rel, sub) if dest_rel and sub else (dest_rel or sub)
            self.copy_file(s, dest, d)
