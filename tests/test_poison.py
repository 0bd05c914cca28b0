"""Poison records on real Spark and real files: a malformed JSON line and a CSV row with a wrong field
count go to the dead-letter output with their origin and reason while the good records give exact
results; under the default fail policy the job stops with a short error naming file and line, the
full trace in a log file under the workdir; key selectors that fail follow the same rules."""

from __future__ import annotations

import os
import re

import pytest

from keyspan.common import Types, WatermarkStrategy
from keyspan.connectors.dead_letter import ErrorPolicy
from keyspan.datastream import OutputTag
from keyspan.datastream.connectors import FileSource, StreamFormat
from keyspan.datastream.formats.csv import CsvRowDeserializationSchema
from keyspan.datastream.formats.json import JsonRowDeserializationSchema
from keyspan.runtime.executor import JobExecutionError

ROW = Types.ROW_NAMED(["user", "amount"], [Types.STRING(), Types.INT()])
TRUNCATED = '{"user": "bob", "amount": 4'


def _json_files(folder):
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"user": "ann", "amount": 1}\n' + TRUNCATED + '\n{"user": "bob", "amount": 2}\n')
    (folder / "b.jsonl").write_text('{"user": "ann", "amount": 10}\n{"user": "cy", "amount": 5}\n')
    return folder


def _run_with_dead_letters(env, fmt, folder):
    """Per-user sums of the good records, and the dead letters, collected together."""
    bad = OutputTag("bad-records")
    source = FileSource.for_record_stream_format(fmt, str(folder)).set_error_policy(ErrorPolicy.dead_letter(bad)).build()
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "input")
    sums = ds.map(lambda r: (r.user, r.amount)).key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
    dead = ds.get_side_output(bad).map(lambda d: ("dead", d.source, d.origin, d.reason, d.raw))
    results = sums.union(dead).execute_and_collect(limit=1000)
    finals = {}
    for r in results:
        if r[0] != "dead":
            finals[r[0]] = max(finals.get(r[0], 0), r[1])
    return finals, [r for r in results if r[0] == "dead"]


def test_malformed_json_line_goes_to_dead_letter_output_and_the_job_goes_on(env, tmp_path):
    folder = _json_files(tmp_path / "in")
    schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    finals, dead = _run_with_dead_letters(env, StreamFormat.line_format(schema), folder)
    assert finals == {"ann": 11, "bob": 2, "cy": 5}
    assert len(dead) == 1
    _, source, origin, reason, raw = dead[0]
    assert origin == f"file://{folder}/a.jsonl line 2"
    assert reason.startswith("malformed JSON")
    assert raw == TRUNCATED.encode()
    assert source == "input"  # the name the job gave from_source


def test_csv_row_with_wrong_field_count_goes_to_dead_letter_output(env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("user,amount\nann,1\nbob,2,extra\nbob,3\n")
    (folder / "b.csv").write_text("user,amount\ncy,7\nann\n")
    finals, dead = _run_with_dead_letters(env, StreamFormat.csv_format(), folder)
    assert finals == {"ann": 1, "bob": 3, "cy": 7}
    by_origin = {d[2]: d for d in dead}
    assert set(by_origin) == {f"file://{folder}/a.csv line 3", f"file://{folder}/b.csv line 3"}
    assert by_origin[f"file://{folder}/a.csv line 3"][3] == "wrong field count: 2 fields expected but the row has 3"
    assert by_origin[f"file://{folder}/a.csv line 3"][4] == b"bob,2,extra"
    assert by_origin[f"file://{folder}/b.csv line 3"][4] == b"ann"


def test_csv_row_schema_lines_with_wrong_field_count_go_to_dead_letter_output(env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text("ann|1\nbob|2|x\nbob|3\ncy|notanumber\n")
    schema = CsvRowDeserializationSchema.Builder(ROW).set_field_delimiter("|").build()
    finals, dead = _run_with_dead_letters(env, StreamFormat.line_format(schema), folder)
    assert finals == {"ann": 1, "bob": 3}
    reasons = {d[2].rsplit(" ", 1)[1]: d[3] for d in dead}
    assert reasons["2"] == "wrong field count: 2 fields expected but the row has 3"
    assert reasons["4"].startswith("field 'amount': cannot read 'notanumber' as INT")


def test_fail_policy_stops_with_a_short_error_naming_file_and_line(env, workdir, tmp_path):
    folder = _json_files(tmp_path / "in")
    schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    source = FileSource.for_record_stream_format(StreamFormat.line_format(schema), str(folder)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "input").map(lambda r: r.amount).print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("poisoned")
    message = str(info.value)
    assert f"{folder}/a.jsonl line 2: malformed JSON" in message
    assert repr(TRUNCATED.encode()) in message  # the record itself (it is shorter than 200 bytes)
    assert "ErrorPolicy.skip()" in message  # what to do next
    assert len(message.splitlines()) == 2 and len(message) < 800 and "Traceback" not in message
    log = re.search(r"\nfull trace: (\S+)$", message).group(1)  # the second line, as for every failure
    assert log.startswith(str(workdir / ".keyspan" / "logs"))
    assert "Traceback" in open(log).read()


def test_fail_message_shows_only_the_first_200_bytes_of_a_long_record(env, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"user": "' + "x" * 5000 + '"\n')
    source = FileSource.for_record_stream_format(StreamFormat.json_lines_format(), str(folder)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "input").print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("long-poison")
    message = str(info.value)
    assert f"{folder}/a.jsonl line 1: malformed JSON" in message
    assert "x" * 190 in message and "x" * 300 not in message and "(5011 bytes)" in message


def test_ignore_parse_errors_drops_bad_records_as_pyflink_does(env, tmp_path):
    folder = _json_files(tmp_path / "in")
    schema = JsonRowDeserializationSchema.builder().type_info(ROW).ignore_parse_errors().build()
    source = FileSource.for_record_stream_format(StreamFormat.line_format(schema), str(folder)).build()
    results = env.from_source(source, WatermarkStrategy.no_watermarks(), "input").execute_and_collect(limit=100)
    assert sorted((r.user, r.amount) for r in results) == [("ann", 1), ("ann", 10), ("bob", 2), ("cy", 5)]


def test_failing_key_selector_names_operator_and_record(env):
    data = [{"user": "ann"}, {"name": "bob"}]
    ds = env.from_collection(data).key_by(lambda r: r["user"]).map(lambda r: r, output_type=None).name("by-user")
    ds.print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("bad-key")
    message = str(info.value)
    assert "the key selector of operator 'by-user'" in message
    assert "{'name': 'bob'}" in message and "KeyError" in message


def test_unhashable_key_is_reported_and_skip_policy_drops_it(env):
    data = [("a", 1), (["not", "hashable", {"x": 1}], 2), ("b", 3), ("a", 4)]
    keyed = env.from_collection(data).key_by(ErrorPolicy.skip().key_selector(lambda r: r[0]))
    results = keyed.reduce(lambda x, y: (x[0], x[1] + y[1])).execute_and_collect(limit=100)
    finals = {}
    for k, v in results:
        finals[k] = max(finals.get(k, 0), v)
    assert finals == {"a": 5, "b": 3}


def test_a_guarded_key_selector_of_a_module_the_workers_cannot_import_ships_with_the_job(env, tmp_path, monkeypatch):
    """The function inside ``ErrorPolicy.skip().key_selector(fn)`` may be the only code of its module
    in the job: the module ships by value all the same (the workers cannot import it)."""
    import importlib
    import uuid

    name = f"keys_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def first(value):\n    return value[0]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = importlib.import_module(name).first
    keyed = env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(ErrorPolicy.skip().key_selector(first))
    assert sorted(keyed.reduce(lambda x, y: (x[0], x[1] + y[1])).execute_and_collect()) == [("a", 1), ("a", 4), ("b", 2)]


def test_unhashable_key_fails_by_default(env):
    env.from_collection([("a", 1), ({"x": 1}, 2)]).key_by(lambda r: r[0]).reduce(lambda x, y: x).print()
    with pytest.raises(JobExecutionError) as info:
        env.execute("unhashable")
    assert "unhashable key" in str(info.value) and "has no stable hash" in str(info.value)


def test_dead_letters_can_go_to_a_file_sink(env, tmp_path):
    from keyspan.common.serialization import Encoder
    from keyspan.datastream.connectors import FileSink

    folder = _json_files(tmp_path / "in")
    schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    bad = OutputTag("bad")
    source = FileSource.for_record_stream_format(StreamFormat.line_format(schema), str(folder)) \
        .set_error_policy(ErrorPolicy.dead_letter(bad)).build()
    ds = env.from_source(source, WatermarkStrategy.no_watermarks(), "input")
    ds.map(lambda r: r.amount).print()
    ds.get_side_output(bad).map(lambda d: f"{d.origin}\t{d.raw.decode()}").sink_to(
        FileSink.for_row_format(str(tmp_path / "dead"), Encoder.simple_string_encoder()).build())
    env.execute("dead-file")
    lines = [line for p in sorted((tmp_path / "dead").iterdir()) if p.is_file() for line in p.read_text().splitlines()]
    assert lines == [f"file://{folder}/a.jsonl line 2\t{TRUNCATED}"]
    assert not any(os.listdir(tmp_path / "dead" / ".staging")) if (tmp_path / "dead" / ".staging").exists() else True


def test_compressed_files_are_read_decompressed_and_a_corrupt_one_is_a_dead_letter(env, tmp_path):
    """As Flink's stream formats do: a file named .gz/.gzip/.bz2/.xz/.deflate is read decompressed, its
    bad lines named by file and line; a file that does not decompress follows the error policy whole."""
    import bz2
    import gzip
    import lzma
    import zlib

    folder = _json_files(tmp_path / "plain")
    packed = tmp_path / "in"
    packed.mkdir()
    a, b = (folder / "a.jsonl").read_bytes(), (folder / "b.jsonl").read_bytes()
    (packed / "a.jsonl.gz").write_bytes(gzip.compress(a))
    (packed / "b1.jsonl.bz2").write_bytes(bz2.compress(b))
    (packed / "b2.jsonl.xz").write_bytes(lzma.compress(b))
    (packed / "b3.jsonl.deflate").write_bytes(zlib.compress(b))
    (packed / "c.jsonl.gzip").write_bytes(gzip.compress(b'{"user": "dee", "amount": 4}\n'))
    (packed / "d.jsonl.gz").write_bytes(b"plain text, not gzip")
    schema = JsonRowDeserializationSchema.builder().type_info(ROW).build()
    finals, dead = _run_with_dead_letters(env, StreamFormat.line_format(schema), packed)
    assert finals == {"ann": 31, "bob": 2, "cy": 15, "dee": 4}  # b's records in three compressions
    assert sorted((origin.rsplit("/", 1)[-1], reason.split(":")[0]) for _, _, origin, reason, _ in dead) == [
        ("a.jsonl.gz line 2", "malformed JSON"), ("d.jsonl.gz", "not a readable gzip file")]
    assert [raw for *_, raw in dead if raw.startswith(b"plain")] == [b"plain text, not gzip"]
