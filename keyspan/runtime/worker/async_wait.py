"""A task's async operator (``AsyncDataStream``): each record's ``async_invoke`` runs on the worker's
event loop while the task goes on reading; at most ``capacity`` calls are in flight, and the task
emits each call's results, with its record's timestamp, in input order (ordered) or as calls finish
(unordered). The task waits for all of them before its epoch's checkpoint (``drain``), so no call
is ever part of a checkpoint. Timeouts and retries run on the loop; the user's ``timeout`` and the
emitting run in the task's thread."""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections import deque
from collections.abc import Iterable

from keyspan.datastream.functions import AsyncFunctionDescriptor
from keyspan.runtime.protocol import UserFunctionError, user_error

_LOOP: dict = {}  # process id → its event loop, started by the first async operator (a forked child starts its own)
_LOOP_LOCK = threading.Lock()
_TIMED_OUT = ("timeout", None)


def event_loop() -> asyncio.AbstractEventLoop:
    """The worker's event loop, run by a daemon thread and shared by its async operators."""
    with _LOOP_LOCK:
        loop = _LOOP.get(os.getpid())
        if loop is None:
            loop = _LOOP[os.getpid()] = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="keyspan-async-io", daemon=True).start()
        return loop


def _never(_) -> bool:
    return False


async def _attempts(function, value, timeout_s: float, strategy) -> tuple:
    """One record's call, retried as ``strategy`` says while its timeout allows: ("ok", results),
    ("error", exception) or ("timeout", None)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s if timeout_s > 0 else None
    predicate = strategy.get_retry_predicate()
    retry_result = predicate.result_predicate() or _never
    retry_error = predicate.exception_predicate() or _never
    attempt = 1
    while True:
        result = error = None
        try:
            if deadline is None:
                result = await function.async_invoke(value)
            else:
                result = await asyncio.wait_for(function.async_invoke(value), deadline - loop.time())
        except Exception as exc:
            if deadline is not None and loop.time() >= deadline:
                return _TIMED_OUT
            error = exc
        wants_retry = retry_error(error) if error is not None else (result is not None and retry_result(result))
        if not (wants_retry and strategy.can_retry(attempt)):
            return ("error", error) if error is not None else ("ok", result)
        backoff = strategy.get_backoff_time_millis(attempt) / 1000
        if deadline is not None and loop.time() + backoff >= deadline:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            return _TIMED_OUT
        await asyncio.sleep(backoff)
        attempt += 1


class AsyncWait:
    """The processor of one async operator in a task: called with each record, ``drain`` at the end."""

    def __init__(self, op, subtask: int, function, emit, ts_cell):
        descriptor: AsyncFunctionDescriptor = op.function  # ``function``: its AsyncFunction, opened
        self._op = op
        self._subtask = subtask
        self._function = function
        self._emit = emit
        self._cell = ts_cell
        self._capacity = descriptor.capacity
        self._timeout_s = descriptor.timeout.to_milliseconds() / 1000
        self._strategy = descriptor.async_retry_strategy
        self._ordered = descriptor.output_mode == AsyncFunctionDescriptor.OutputMode.ORDERED
        self._loop = event_loop()
        self._in_flight: deque = deque()  # ordered: (future, record, timestamp) in input order
        self._calls: dict = {}  # unordered: call number → (future, record, timestamp)
        self._finished: queue.SimpleQueue = queue.SimpleQueue()  # unordered: call numbers, as calls finish
        self._next_call = 0

    def __call__(self, value) -> None:
        if self._pending() >= self._capacity:
            self._emit_finished(wait=True)
        future = asyncio.run_coroutine_threadsafe(
            _attempts(self._function, value, self._timeout_s, self._strategy), self._loop)
        entry = (future, value, self._cell[0])
        if self._ordered:
            self._in_flight.append(entry)
        else:
            call = self._next_call
            self._next_call += 1
            self._calls[call] = entry
            future.add_done_callback(lambda _, call=call: self._finished.put(call))
        self._emit_finished(wait=False)

    def drain(self) -> None:
        """Waits for every call in flight and emits its results."""
        while self._pending():
            self._emit_finished(wait=True)

    def cancel(self) -> None:
        """The task failed: calls still in flight are dropped (the epoch runs again)."""
        for future, _, _ in [*self._in_flight, *self._calls.values()]:
            future.cancel()
        self._in_flight.clear()
        self._calls.clear()

    def _pending(self) -> int:
        return len(self._in_flight) if self._ordered else len(self._calls)

    def _emit_finished(self, wait: bool) -> None:
        """Emits the results of finished calls: in order, the head of the queue and those behind it
        that are done; unordered, every finished call. ``wait``: at least one, waiting for it."""
        if self._ordered:
            in_flight = self._in_flight
            while in_flight and (wait or in_flight[0][0].done()):
                self._emit_results(*in_flight.popleft())
                wait = False
            return
        finished = self._finished
        while self._calls:
            try:
                call = finished.get() if wait else finished.get_nowait()
            except queue.Empty:
                return
            wait = False
            self._emit_results(*self._calls.pop(call))

    def _emit_results(self, future, value, timestamp) -> None:
        op, subtask = self._op, self._subtask
        try:
            kind, payload = future.result()  # raises what a retry strategy's own methods raised
            if kind == "error":
                raise payload
            results = self._function.timeout(value) if kind == "timeout" else payload
            if results is None or not isinstance(results, Iterable):
                what = "none" if results is None else f"of type {type(results).__name__}"
                raise TypeError(f"the result of AsyncFunction '{type(self._function).__name__}' should be a "
                                f"list, got {what}: check its methods 'async_invoke' and 'timeout'")
        except UserFunctionError:
            raise
        except Exception as exc:
            raise user_error(op, subtask, exc, record=value) from exc
        cell = self._cell
        given = cell[0]
        cell[0] = timestamp
        try:
            for out in results:
                self._emit(out)
        finally:
            cell[0] = given
