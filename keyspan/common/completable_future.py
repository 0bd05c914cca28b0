"""``CompletableFuture`` as in ``pyflink.common.completable_future``: what ``JobClient`` hands back for
a result that arrives later."""

from __future__ import annotations

import threading
from concurrent.futures import Future


class CompletableFuture:
    """PyFlink's future: ``result()`` waits for the value (or raises the job's error)."""

    def __init__(self, future: Future):
        self._future = future

    def cancel(self) -> bool:
        return self._future.cancel()

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None):
        return self._future.result(timeout)

    def exception(self, timeout: float | None = None):
        return self._future.exception(timeout)

    @staticmethod
    def _run(fn) -> "CompletableFuture":
        future: Future = Future()

        def run():
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 — handed to the caller of result()
                future.set_exception(exc)
        threading.Thread(target=run, daemon=True).start()
        return CompletableFuture(future)

    @staticmethod
    def _of(value) -> "CompletableFuture":
        future: Future = Future()
        future.set_result(value)
        return CompletableFuture(future)
