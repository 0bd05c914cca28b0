"""The running sum on Apache Flink through PyFlink: the peer keyspan ports jobs from.

Runs inside a venv that has ``apache-flink`` (never keyspan's own environment: PyFlink pins its
own Beam, pandas and protobuf). ``bench/running_sum.py --pyflink`` starts it as a subprocess on
the same events (CSV copies of the same Parquet files) and prints keyspan's ratio. Create the venv:

    python3 -m venv /work/pyflink-venv && /work/pyflink-venv/bin/pip install apache-flink==2.3.0

and run one mode by hand (prints one JSON line):

    /work/pyflink-venv/bin/python bench/pyflink_peer.py --input DIR_OF_CSV --mode thread --out DIR

Modes, all streaming, parallelism 2, a heap (hashmap) state backend with a checkpoint every
second to local files:

* ``thread`` / ``process``: CSV table source → ``to_data_stream`` → ``key_by(lambda r: r.key)`` →
  a Python ``KeyedProcessFunction`` with ``ValueState`` emitting ``(key, running sum)`` per record,
  in ``python.execution-mode`` thread (Python embedded in the JVM by pemja) or process (Beam's
  separate Python workers, PyFlink's default). Its output goes to a CSV file sink, which the
  caller reads back to check every key's last running sum.
* ``sql``: ``INSERT INTO blackhole SELECT key, SUM(value) FROM events GROUP BY key`` — Flink's JVM
  aggregation, no Python per record (mini-batch off, Flink's default).

Rate = events ÷ the job's net runtime as Flink reports it (``JobExecutionResult``), which leaves out
the gateway's start; the wall time of ``wait()`` is printed too.
"""

from __future__ import annotations

import argparse
import json
import os
import site
import sys
import time

# thread mode embeds this interpreter's libpython in the JVM (pemja), whose sys.path is the base
# installation's: it finds this venv's packages (pemja, pyflink) only through PYTHONPATH, which the JVM
# that PyFlink launches inherits.
os.environ["PYTHONPATH"] = os.pathsep.join(site.getsitepackages() + [os.path.dirname(os.path.abspath(__file__))])

from pyflink.common import Configuration, Row, Types
from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.state import ValueStateDescriptor
from pyflink.table import StreamTableEnvironment


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value.value
        self.total.update(total)
        yield Row(value.key, total)


def environment(mode: str, parallelism: int, checkpoints: str):
    config = Configuration()
    config.set_string("python.execution-mode", "process" if mode == "process" else "thread")
    config.set_string("python.executable", sys.executable)  # this venv's, which has pemja and pyflink
    config.set_string("python.client.executable", sys.executable)
    config.set_string("restart-strategy.type", "none")  # a failure ends the run instead of looping
    config.set_string("state.backend.type", "hashmap")
    config.set_string("execution.checkpointing.dir", "file://" + os.path.abspath(checkpoints))
    config.set_string("taskmanager.memory.process.size", "2g")
    config.set_string("rest.bind-address", "127.0.0.1")
    env = StreamExecutionEnvironment.get_execution_environment(config)
    env.set_parallelism(parallelism)
    env.enable_checkpointing(1000)
    return env, StreamTableEnvironment.create(env)


def source_table(t_env, directory: str) -> None:
    t_env.execute_sql(f"""
        CREATE TABLE events (`key` BIGINT, `value` BIGINT) WITH (
          'connector' = 'filesystem', 'path' = 'file://{os.path.abspath(directory)}',
          'format' = 'csv')""")


def run(args) -> dict:
    env, t_env = environment(args.mode, args.parallelism, os.path.join(args.out, "checkpoints"))
    source_table(t_env, args.input)
    if args.mode == "sql":
        t_env.execute_sql("CREATE TABLE sums (`key` BIGINT, total BIGINT) WITH ('connector' = 'blackhole')")
        start = time.perf_counter()
        result = t_env.execute_sql("INSERT INTO sums SELECT `key`, SUM(`value`) FROM events GROUP BY `key`")
        result.wait()
        wall = time.perf_counter() - start
        net = result.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
    else:
        stream = t_env.to_data_stream(t_env.from_path("events"))
        sums = (stream.key_by(lambda r: r.key, key_type=Types.LONG())
                .process(RunningSum(), output_type=Types.ROW_NAMED(["key", "total"], [Types.LONG(), Types.LONG()])))
        t_env.execute_sql(f"""
            CREATE TABLE sums (`key` BIGINT, total BIGINT) WITH (
              'connector' = 'filesystem', 'path' = 'file://{os.path.abspath(os.path.join(args.out, "sums"))}',
              'format' = 'csv')""")
        start = time.perf_counter()
        result = t_env.from_data_stream(sums).execute_insert("sums")
        result.wait()
        wall = time.perf_counter() - start
        net = result.get_job_client().get_job_execution_result().result().get_net_runtime() / 1000
    return {"mode": args.mode, "events": args.events, "seconds": net, "wall_seconds": wall,
            "rate": args.events / net}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True, help="folder of CSV files: key,value")
    ap.add_argument("--events", type=int, required=True, help="number of events in --input")
    ap.add_argument("--mode", choices=("thread", "process", "sql"), required=True)
    ap.add_argument("--out", required=True, help="an empty folder for checkpoints and the sums")
    ap.add_argument("--parallelism", type=int, default=2)
    print(json.dumps(run(ap.parse_args())))


if __name__ == "__main__":
    main()
