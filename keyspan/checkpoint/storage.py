"""Old import path of :mod:`keyspan.io.storage`, kept for code written against earlier releases."""

from keyspan.io.storage import Storage, StorageError, is_transient  # noqa: F401
