"""The keyed function of ``cluster_job.py``, in a module of its own: executors on other hosts must
import it from the code keyspan (or ``spark-submit --py-files``) shipped to them."""

from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.state import ValueStateDescriptor


def parse(line: str):
    key, value = line.split(",")
    return key, int(value)


class RunningCount(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield f"{ctx.get_current_key()},{n}"
