"""Checkpoint storage addressed by URI (file://, s3://, hdfs://, memory://) through fsspec."""

from __future__ import annotations

import os
import posixpath
import uuid

import fsspec


class Storage:
    """A directory tree under a root URI. Writes are atomic: a reader sees a whole file or none."""

    def __init__(self, uri: str, storage_options: dict | None = None):
        if "://" not in uri:
            uri = "file://" + os.path.abspath(uri)
        self.uri = uri.rstrip("/")
        self.storage_options = storage_options or {}
        self._fs = None
        self._root = None

    def __getstate__(self):
        return {"uri": self.uri, "storage_options": self.storage_options}

    def __setstate__(self, state):
        self.__init__(state["uri"], state["storage_options"])

    def _resolve(self):
        if self._fs is None:
            self._fs, self._root = fsspec.core.url_to_fs(self.uri, **self.storage_options)
        return self._fs, self._root

    @property
    def fs(self):
        return self._resolve()[0]

    @property
    def is_local(self) -> bool:
        return self.uri.startswith("file://")

    def full_path(self, rel: str) -> str:
        return posixpath.join(self._resolve()[1], rel)

    def url(self, rel: str) -> str:
        return self.uri + "/" + rel

    def child(self, rel: str) -> "Storage":
        return Storage(self.url(rel), self.storage_options)

    def write(self, rel: str, data: bytes) -> None:
        fs, _ = self._resolve()
        target = self.full_path(rel)
        parent = posixpath.dirname(target)
        if self.is_local:
            os.makedirs(parent, exist_ok=True)
            tmp = f"{target}.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        else:  # object stores publish a PUT atomically
            fs.pipe_file(target, data)

    def read(self, rel: str, offset: int = 0, length: int | None = None) -> bytes:
        fs, _ = self._resolve()
        path = self.full_path(rel)
        if offset == 0 and length is None:
            return fs.cat_file(path)
        end = None if length is None else offset + length
        return fs.cat_file(path, start=offset, end=end)

    def size(self, rel: str) -> int:
        return self.fs.size(self.full_path(rel))

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.full_path(rel))

    def delete(self, rel: str, recursive: bool = False) -> None:
        path = self.full_path(rel)
        fs = self.fs
        if fs.exists(path):
            fs.rm(path, recursive=recursive)

    def list(self, rel: str = "") -> list[str]:
        """Names directly under ``rel`` (empty when it does not exist)."""
        path = self.full_path(rel)
        fs = self.fs
        if not fs.exists(path):
            return []
        return sorted(posixpath.basename(p.rstrip("/")) for p in fs.ls(path, detail=False))

    def rename(self, src: str, dst: str) -> None:
        fs = self.fs
        target = self.full_path(dst)
        if self.is_local:
            os.makedirs(posixpath.dirname(target), exist_ok=True)
            os.replace(self.full_path(src), target)
        else:
            fs.mv(self.full_path(src), target)

    def copy_tree(self, src_rel: str, dest: "Storage", dest_rel: str) -> None:
        for name in self.list(src_rel):
            s = posixpath.join(src_rel, name) if src_rel else name
            d = posixpath.join(dest_rel, name) if dest_rel else name
            if self.fs.isdir(self.full_path(s)):
                self.copy_tree(s, dest, d)
            else:
                dest.write(d, self.read(s))
