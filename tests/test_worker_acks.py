"""The Python worker acknowledges what Spark's JVM sends it at once (``PromptAcks``): without it
every Python task of a small epoch waited on Linux's delayed acknowledgement (docs/benchmarks.md,
"Python workers acknowledge at once")."""

from __future__ import annotations

import socket

import pytest

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_QUICKACK"), reason="TCP_QUICKACK is Linux's")


def test_a_python_task_finds_its_tcp_connection_to_the_jvm_and_acknowledges_at_once(spark):
    def probe(batches):
        import pyarrow as pa

        from keyspan.runtime.worker.acks import PromptAcks

        acks = PromptAcks()
        connection = acks.connection
        rows = sum(batch.num_rows for batch in acks.batches(batches))
        found = connection is not None
        delayed = quick = None
        if found:  # as Linux does on a connection that looks interactive; now() turns it back
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 0)
            delayed = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)
            acks.now()
            quick = connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)
        yield pa.RecordBatch.from_pydict({
            "rows": [rows],
            "tcp": [found and connection.family in (socket.AF_INET, socket.AF_INET6)],
            "loopback_peer": [found and connection.getpeername()[0] in ("127.0.0.1", "::1")],
            "delayed": [delayed],
            "quick": [quick],
        })
        acks.close()

    schema = "rows long, tcp boolean, loopback_peer boolean, delayed long, quick long"
    for _ in range(2):  # the second job reuses the workers: closing the duplicate left their connection open
        reports = spark.range(100, numPartitions=2).mapInArrow(probe, schema).collect()
        assert sum(r.rows for r in reports) == 100
        assert all(r.tcp and r.loopback_peer for r in reports), reports
        assert all(r.delayed == 0 and r.quick == 1 for r in reports), reports


def test_outside_a_spark_task_there_is_no_connection_and_nothing_fails():
    from keyspan.runtime.worker.acks import PromptAcks

    acks = PromptAcks()
    assert acks.connection is None
    assert list(acks.batches(iter([1, 2]))) == [1, 2]
    acks.now()
    acks.close()
