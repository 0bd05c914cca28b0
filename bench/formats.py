"""What formats cost per record inside a task (no Spark: the code a source or sink task runs).

Prints plain json.dumps/json.loads rates first, as the yardstick of the machine's speed at the
time (the shared test machine's load varies tenfold). Parses one file of N JSON lines / CSV lines through the FileSource formats (with and without 1 %
poison records going to the dead-letter policy), serializes rows with the row schemas, and writes
them through a rolling, bucketing FileSink writer and the Parquet bulk writer into a temp folder.

    python bench/formats.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from keyspan.common import Row, Types  # noqa: E402
from keyspan.common.serialization import Encoder  # noqa: E402
from keyspan.connectors.dead_letter import ErrorPolicy  # noqa: E402
from keyspan.datastream import OutputTag  # noqa: E402
from keyspan.datastream.connectors import BucketAssigner, FileSink, RollingPolicy, StreamFormat  # noqa: E402
from keyspan.datastream.formats.csv import CsvRowDeserializationSchema, CsvRowSerializationSchema  # noqa: E402
from keyspan.datastream.formats.json import JsonRowDeserializationSchema, JsonRowSerializationSchema  # noqa: E402
from keyspan.datastream.formats.parquet import ParquetBulkWriters  # noqa: E402

ROW = Types.ROW_NAMED(["user", "amount", "price", "country"], [Types.STRING(), Types.LONG(), Types.DOUBLE(), Types.STRING()])


class ByCountry(BucketAssigner):
    def get_bucket_id(self, element, context):
        return element.country


def rate(label: str, n: int, fn) -> None:
    start = time.perf_counter()
    fn()
    seconds = time.perf_counter() - start
    print(f"{label:<58} {n / seconds / 1000:8.0f} k records/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    n = parser.parse_args().records
    rows = [Row(user=f"u{i % 1000}", amount=i, price=i / 7, country=("de", "fr", "us")[i % 3]) for i in range(n)]
    json_ser = JsonRowSerializationSchema.builder().with_type_info(ROW).build()
    csv_ser = CsvRowSerializationSchema.Builder(ROW).build()
    json_data = b"\n".join(json_ser.serialize(r) for r in rows)
    csv_data = b"".join(csv_ser.serialize(r) for r in rows)
    poisoned = b"\n".join(b'{"user": "x", "amount": 1' if i % 100 == 0 else json_ser.serialize(r)
                          for i, r in enumerate(rows))
    json_schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    csv_schema = CsvRowDeserializationSchema.Builder(ROW).build()
    dead = ErrorPolicy.dead_letter(OutputTag("bad")).handler("bench")
    fail = ErrorPolicy.fail().handler("bench")

    import json

    lines = json_data.split(b"\n")
    rate("baseline: json.dumps of a dict (machine speed now)", n,
         lambda: [json.dumps(r.as_dict()) for r in rows])
    rate("baseline: json.loads of a line (machine speed now)", n, lambda: [json.loads(line) for line in lines])
    rate("JsonRowSerializationSchema.serialize", n, lambda: [json_ser.serialize(r) for r in rows])
    rate("CsvRowSerializationSchema.serialize", n, lambda: [csv_ser.serialize(r) for r in rows])
    rate("StreamFormat.json_lines_format() (untyped dict rows)", n,
         lambda: StreamFormat.json_lines_format().parse(json_data, "f", fail))
    rate("line_format(JsonRowDeserializationSchema)", n, lambda: StreamFormat.line_format(json_schema).parse(json_data, "f", fail))
    rate("line_format(JsonRowDeserializationSchema), 1 % poison → dead letter", n,
         lambda: StreamFormat.line_format(json_schema).parse(poisoned, "f", dead))
    rate("line_format(CsvRowDeserializationSchema)", n, lambda: StreamFormat.line_format(csv_schema).parse(csv_data, "f", fail))
    header = b"user,amount,price,country\n"
    rate("StreamFormat.csv_format() (pyarrow)", n, lambda: StreamFormat.csv_format().parse(header + csv_data, "f", fail))

    with tempfile.TemporaryDirectory() as tmp:
        sink = FileSink.for_row_format(os.path.join(tmp, "rows"), Encoder(json_ser.serialize)) \
            .with_bucket_assigner(ByCountry()).with_rolling_policy(RollingPolicy.default_rolling_policy(part_size=1 << 20)).build()

        def write_rows():
            writer = sink.create_writer(0, 1, "bench")
            for r in rows:
                writer.write(r)
            sink.publish(writer.finish())
        rate("FileSink row format, 3 buckets, rolling at 1 MiB (+ publish)", n, write_rows)
        bulk = FileSink.for_bulk_format(os.path.join(tmp, "pq"), ParquetBulkWriters.for_row_type(ROW)).build()

        def write_parquet():
            writer = bulk.create_writer(0, 1, "bench")
            for r in rows:
                writer.write(r)
            bulk.publish(writer.finish())
        rate("FileSink bulk format, ParquetBulkWriters (+ publish)", n, write_parquet)


if __name__ == "__main__":
    main()
