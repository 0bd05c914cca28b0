"""The confluent-kafka clients of one process, closed before the interpreter shuts down.

Spark reuses Python workers across tasks, so consumers and producers are made once per config and
kept. A librdkafka client still open when the interpreter tears its modules down calls back into a
half-finalized Python (its logger, delivery reports); closing every client from ``atexit`` runs that
work while Python is whole.
"""

from __future__ import annotations

import atexit
import logging
import re
import threading
import time

CLIENT_LOG = logging.getLogger("keyspan.kafka")  # librdkafka's own messages (e.g. a broker unreachable)
REPEAT_EVERY_S = 60.0  # librdkafka retries an unreachable broker several times a second, saying so each time


class _Repeats(logging.Filter):
    """Lets a librdkafka message through once per ``REPEAT_EVERY_S`` (messages that differ only in a
    duration count as the same): one line says a broker is unreachable, not hundreds."""

    def __init__(self):
        super().__init__()
        self._last: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = re.sub(r"\d+ ?ms\b", "#ms", record.getMessage())
        now = time.monotonic()
        if now - self._last.get(text, float("-inf")) < REPEAT_EVERY_S:
            return False
        if len(self._last) > 1000:
            self._last.clear()
        self._last[text] = now
        return True


CLIENT_LOG.addFilter(_Repeats())
FLUSH_AT_EXIT_S = 5.0  # how long a producer may still deliver what it queued when the process exits

_shared: dict = {}  # (kind, config items) → client
_owned: list = []  # clients made for one owner (a sink's transactional publisher)
_lock = threading.Lock()


def shared_consumer(config: dict):
    from confluent_kafka import Consumer

    return _shared_client(Consumer, config)


def shared_producer(config: dict):
    from confluent_kafka import Producer

    return _shared_client(Producer, config)


def _shared_client(kind, config: dict):
    key = (kind.__name__, tuple(sorted(config.items())))
    with _lock:
        client = _shared.get(key)
        if client is None:
            client = _shared[key] = kind(config)
        return client


def owned(client):
    """Registers a client its owner closes with ``release`` (or the process, on exit)."""
    with _lock:
        _owned.append(client)
    return client


def release(*clients) -> None:
    """Closes ``clients`` unless the process already did (``close_all``)."""
    with _lock:
        still_open = [c for c in _owned if any(c is client for client in clients)]
        _owned[:] = [c for c in _owned if not any(c is client for client in clients)]
    for client in still_open:
        _close(client)


def _close(client) -> None:
    try:
        if hasattr(client, "produce"):
            client.flush(FLUSH_AT_EXIT_S)
        else:
            client.close()  # a consumer: leaves its group and stops its threads
    except Exception as exc:  # noqa: BLE001 — closing must not hide the job's own outcome
        CLIENT_LOG.warning("closing a Kafka client failed: %s", exc)


@atexit.register
def close_all() -> None:
    """Closes every client of this process (the next use makes new ones)."""
    with _lock:
        clients = list(_shared.values()) + _owned
        _shared.clear()
        _owned.clear()
    for client in clients:
        _close(client)
    # returning drops the last references: librdkafka's teardown runs now, with Python still whole
