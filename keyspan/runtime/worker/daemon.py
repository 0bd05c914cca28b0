"""Spark's Python daemon (``pyspark.daemon``) as keyspan's sessions run it (``spark.python.daemon.module``),
without one trace. Over Unix sockets, a worker whose socket the JVM closed while it sat idle (Spark
stops workers idle for a minute, and every worker when the session stops) fails the last flush of its
output with ``BrokenPipeError``, and the daemon prints that trace to the executor's stderr: in local
mode, the terminal of whoever runs the job. Over TCP the same flush passes unnoticed. The worker ends
either way; only the trace goes. Imports nothing but PySpark's daemon: it forks the workers, and a
thread started before a fork (by pyarrow or pandas, say) would not survive it."""

import pyspark.daemon as _daemon

_serve = _daemon.worker


def worker(sock, authenticated):
    try:
        return _serve(sock, authenticated)
    except BrokenPipeError:
        return 1  # the JVM is gone from this socket: end the worker, as the daemon does after any failure


_daemon.worker = worker

if __name__ == "__main__":
    _daemon.manager()
