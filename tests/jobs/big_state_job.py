"""A job whose keyed state (BIG_STATE_KEYS × BIG_STATE_VALUE_BYTES of values) is far larger than the memory
its Spark Python workers may use: the SparkSession is created here, before keyspan's environment, with
``spark.executor.pyspark.memory`` = BIG_STATE_WORKER_MEMORY (PySpark then sets RLIMIT_AS on every Python
worker), and keyspan runs on that active session. BIG_STATE_BACKEND = rocksdb | heap.
"""

import hashlib
import os
import sys

from pyspark.sql import SparkSession

from keyspan.datastream import (EmbeddedRocksDBStateBackend, HashMapStateBackend, KeyedProcessFunction,
                                StreamExecutionEnvironment)
from keyspan.datastream.connectors.file_system import DiscardingSink
from keyspan.datastream.state import ValueStateDescriptor

KEYS = int(os.environ.get("BIG_STATE_KEYS", "4000"))
VALUE_BYTES = int(os.environ.get("BIG_STATE_VALUE_BYTES", "100000"))
PER_EPOCH = int(os.environ.get("BIG_STATE_PER_EPOCH", "250"))
BACKEND = os.environ.get("BIG_STATE_BACKEND", "rocksdb")
WORKER_MEMORY = os.environ["BIG_STATE_WORKER_MEMORY"]  # e.g. "1600m"


def blob(key: int) -> bytes:
    """The value kept for a key: VALUE_BYTES derived from the key, so a reader can check it."""
    digest = hashlib.sha256(str(key).encode()).digest()
    return (digest * (VALUE_BYTES // len(digest) + 1))[:VALUE_BYTES]


class Keep(KeyedProcessFunction):
    def open(self, runtime_context):
        self.blob = runtime_context.get_state(ValueStateDescriptor("blob"))

    def process_element(self, value, ctx):
        self.blob.update(blob(value))
        yield value


os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
spark = (SparkSession.builder.master("local[2]").appName("big-state")
         .config("spark.pyspark.python", sys.executable)
         .config("spark.executor.pyspark.memory", WORKER_MEMORY)
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2").config("spark.python.worker.reuse", "true")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_max_records_per_epoch(PER_EPOCH)
env.set_state_backend(EmbeddedRocksDBStateBackend() if BACKEND == "rocksdb" else HashMapStateBackend())
(env.from_collection(list(range(KEYS))).uid("keys")
    .key_by(lambda k: k)
    .process(Keep()).uid("keep")
    .sink_to(DiscardingSink()).uid("out"))
env.execute("big-state")
