from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.state import ValueStateDescriptor


class RunningSum(KeyedProcessFunction):
    def open(self, runtime_context):
        self.total = runtime_context.get_state(ValueStateDescriptor("total"))

    def process_element(self, value, ctx):
        total = (self.total.value() or 0) + value[1]
        self.total.update(total)
        yield ctx.get_current_key(), total


def test_running_sum_over_several_epochs(env):
    env.set_max_records_per_epoch(5)
    data = [(f"k{i % 4}", i) for i in range(23)]
    result = env.from_collection(data).key_by(lambda r: r[0]).process(RunningSum()).execute_and_collect(limit=1000)
    expected = {}
    want = []
    for k, v in data:
        expected[k] = expected.get(k, 0) + v
        want.append((k, expected[k]))
    assert sorted(result) == sorted(want)
