"""The RocksDB directories are scratch space: deleted when a backend is closed or collected, and
directories left by dead worker processes of this host are swept when a process opens its first."""

from __future__ import annotations

import os
import shutil
import socket

def _dispose(db, path: str) -> None:
    try:
        db.close()
    except Exception:  # noqa: BLE001 — already closed
        pass
    shutil.rmtree(path, ignore_errors=True)
    pid_dir = os.path.dirname(path)
    try:
        if os.listdir(pid_dir) == [_HOST_FILE]:  # the process's last backend: remove its directory
            shutil.rmtree(pid_dir, ignore_errors=True)
    except OSError:
        pass


_HOST_FILE = "HOST"
_SWEPT: set[str] = set()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _prepare_pid_dir(root: str) -> str:
    """``root/<pid>``, marked with this host's name. Once per process and root, delete the
    directories of processes of this host that are gone: Spark's Python workers end with
    ``os._exit``, so their backends never get to delete their own directories."""
    host = socket.gethostname()
    if root not in _SWEPT:
        _SWEPT.add(root)
        try:
            names = os.listdir(root)
        except OSError:
            names = []
        for name in names:
            if not name.isdigit() or int(name) == os.getpid():
                continue
            stale = os.path.join(root, name)
            try:
                with open(os.path.join(stale, _HOST_FILE)) as f:
                    if f.read() != host:
                        continue
            except OSError:
                continue
            if not _alive(int(name)):
                shutil.rmtree(stale, ignore_errors=True)
    pid_dir = os.path.join(root, str(os.getpid()))
    os.makedirs(pid_dir, exist_ok=True)
    marker = os.path.join(pid_dir, _HOST_FILE)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write(host)
    return pid_dir
