"""Seed 003's correctness experiment, as a keyspan job.

A generated log of events (login, service interaction, logout) per entity is read file by file;
a KeyedProcessFunction keeps, per entity, whether it is logged in (ValueState) and how many
events of each type it has seen (MapState), and raises an alert when an interaction comes without
a login. The log is valid, so every alert would be a false alert: with exactly-once state there
must be none, however often the job is killed and restarted (try: start it, Ctrl-C or kill -9 it
mid-way, and run it again without --fresh).

Run:  keyspan run examples/session_alerts.py --fresh
"""

from __future__ import annotations

import glob
import json
import os
import random

from keyspan.common import Encoder, Types
from keyspan.datastream import KeyedProcessFunction, RuntimeContext, StreamExecutionEnvironment
from keyspan.datastream.connectors.file_system import FileSink, FileSource, StreamFormat
from keyspan.datastream.state import MapStateDescriptor, ValueStateDescriptor

DEMO_DIR = os.path.abspath(os.environ.get("KEYSPAN_DEMO_DIR", os.path.join(".keyspan", "demo")))
INPUT_DIR = os.path.join(DEMO_DIR, "events")
OUTPUT_DIR = os.path.join(DEMO_DIR, "alerts")


def generate_log(directory: str, entities: int = 2_000, files: int = 12, seed: int = 3) -> int:
    """A valid event log: each entity logs in, interacts 1–5 times, logs out, again and again.
    Entities interleave at random; each entity's own order is kept across files."""
    rng = random.Random(seed)
    queues = []
    for e in range(entities):
        events = []
        for _ in range(rng.randint(1, 4)):
            events.append("login")
            events.extend("interaction" for _ in range(rng.randint(1, 5)))
            events.append("logout")
        queues.append([f"entity-{e:05d}", events, 0])
    lines = []
    active = list(range(entities))
    while active:
        i = rng.randrange(len(active))
        entity, events, pos = queues[active[i]]
        lines.append(json.dumps({"entity": entity, "event": events[pos], "seq": len(lines)}))
        queues[active[i]][2] += 1
        if pos + 1 == len(events):
            active[i] = active[-1]
            active.pop()
    os.makedirs(directory, exist_ok=True)
    per_file = -(-len(lines) // files)
    for f in range(files):
        with open(os.path.join(directory, f"events-{f:04d}.jsonl"), "w") as out:
            out.write("\n".join(lines[f * per_file:(f + 1) * per_file]) + "\n")
    return len(lines)


class SessionValidator(KeyedProcessFunction):
    """Checks each entity's event sequence: an interaction must come after a login."""

    def open(self, runtime_context: RuntimeContext):
        self.logged_in = runtime_context.get_state(ValueStateDescriptor("logged_in", Types.BOOLEAN()))
        self.counts = runtime_context.get_map_state(MapStateDescriptor("counts", Types.STRING(), Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        event = value.event
        self.counts.put(event, (self.counts.get(event) or 0) + 1)
        if event == "login":
            self.logged_in.update(True)
        elif event == "logout":
            self.logged_in.clear()
        elif not self.logged_in.value():
            yield json.dumps({"alert": "interaction without login", "entity": ctx.get_current_key(),
                              "seq": value.seq, "seen": dict(self.counts.items())})


def main():
    if not glob.glob(os.path.join(INPUT_DIR, "*.jsonl")):
        n = generate_log(INPUT_DIR)
        print(f"generated {n} events in {INPUT_DIR}")
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    source = (FileSource.for_record_stream_format(StreamFormat.json_lines_format(), INPUT_DIR)
              .set_max_files_per_epoch(1).build())
    alerts = (env.from_source(source, None, "event log").uid("event-log")
              .key_by(lambda event: event.entity)
              .process(SessionValidator()).uid("session-validator").name("validate sessions"))
    alerts.sink_to(FileSink.for_row_format(OUTPUT_DIR, Encoder.simple_string_encoder()).build()).uid("alerts")
    result = env.execute("session-alerts")
    files = [p for p in glob.glob(os.path.join(OUTPUT_DIR, "*")) if os.path.isfile(p)]
    count = 0
    for path in files:
        with open(path) as f:
            count += sum(1 for line in f if line.strip())
    print(f"processed {result.records} events in {result.epochs} epochs (checkpoint {result.last_checkpoint})")
    print(f"false alerts: {count}  (exactly-once state means this is 0)")
    print(f"alert output: {OUTPUT_DIR}")


if __name__ == "__main__":
    main()
