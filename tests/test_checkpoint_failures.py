"""A checkpoint whose files cannot be written fails without touching the previous one; the epoch
runs again, and after tolerable_checkpoint_failure_number consecutive failures the job fails with
the storage error. The state files the failed attempt wrote are listed, and deleted on request."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from keyspan.checkpoint.integrity import verify_manifest
from keyspan.checkpoint.metadata import MetadataStore
from keyspan.checkpoint.unreferenced import unreferenced_state_files
from keyspan.common import Encoder
from keyspan.datastream import KeyedProcessFunction
from keyspan.datastream.connectors.file_system import FileSink
from keyspan.datastream.state import ValueStateDescriptor
from keyspan.io.storage import Storage
from keyspan.runtime import options as run_options
from keyspan.runtime.executor import JobExecutionError

class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        n = (self.n.value() or 0) + 1
        self.n.update(n)
        yield f"{ctx.get_current_key()} {n}"


def block_staging_until_epoch_rerun(out: str, counter: str, trigger: int):
    """A map function: at record ``trigger`` it turns the sink's staging folder into a file, so the
    epoch's output cannot be staged. Spark's retries of the failing sink task do not run this map
    again (its shuffle output stands), so the block lasts until keyspan runs the epoch again."""

    def fn(value):
        if value[1] == trigger:
            seen = int(Path(counter).read_text()) + 1 if os.path.exists(counter) else 1
            Path(counter).write_text(str(seen))
            staging = os.path.join(out, ".staging")
            if seen == 1:
                shutil.rmtree(staging, ignore_errors=True)
                Path(staging).write_text("blocked")
            elif os.path.isfile(staging):
                os.remove(staging)
        return value

    return fn


def build(env, workdir: Path, tolerable: int):
    out = str(workdir / "out")
    env.set_max_records_per_epoch(20)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(tolerable)
    data = [(f"k{i % 4}", i) for i in range(100)]
    (env.from_collection(data).map(block_staging_until_epoch_rerun(out, str(workdir / "seen"), trigger=55))
        .key_by(lambda r: r[0]).process(Count()).uid("count")
        .sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()).uid("sink"))
    return Path(out)


def _lines(out: Path):
    return sorted(line for p in out.iterdir() if p.is_file() and not p.name.startswith(".")
                  for line in p.read_text().splitlines())


def test_failed_checkpoint_is_retried_within_tolerance(env, workdir, capfd):
    out = build(env, workdir, tolerable=1)
    env.execute("tolerant")
    assert int((workdir / "seen").read_text()) == 2
    assert _lines(out) == sorted(f"k{k} {n}" for k in range(4) for n in range(1, 26))
    assert "checkpoint of epoch 2 failed" in capfd.readouterr().err


def test_too_many_failed_checkpoints_fail_the_job_with_the_storage_error(env, workdir):
    out = build(env, workdir, tolerable=0)
    with pytest.raises(JobExecutionError, match=r"(?s)checkpoint of epoch 2 failed 1 time.*\.staging.*"
                       r"running the job again resumes from its last checkpoint"):
        env.execute("intolerant")
    store = MetadataStore(run_options.current().metadata())
    assert store.latest_checkpoint("intolerant")["epoch"] == 1  # the previous checkpoint stands
    assert len(_lines(out)) == 40  # and only the output of committed epochs 0 and 1 is visible


def test_the_failed_attempt_s_state_files_are_listed_and_deleted_only_on_request(env, workdir):
    """The first run of epoch 2 wrote its state files before its checkpoint failed; the epoch's rerun
    committed other files. ``keyspan checkpoints --unreferenced`` lists the first ones (and nothing a
    retained checkpoint needs); ``--delete-unreferenced`` deletes exactly those."""
    build(env, workdir, tolerable=1)
    env.execute("leftovers")
    options = run_options.current()
    store = MetadataStore(options.metadata())
    storage = Storage(options.checkpoint_root()).child("leftovers")
    retained = store.list_checkpoints("leftovers", include_discarded=False)
    needed = {h["path"] for c in retained for handles in c["manifest"].values() for h in handles}
    every_file = {f"state/{rel}" for rel in storage.files_under("state")}
    left = unreferenced_state_files(store, storage, "leftovers")
    assert left and {f.epoch for f in left} == {2} and not {f.path for f in left} & needed
    assert {f.path for f in left} == every_file - needed

    def cli(*flags):
        return subprocess.run([sys.executable, "-m", "keyspan", "checkpoints", "leftovers", "--workdir",
                               options.workdir, *flags], capture_output=True, text=True, timeout=120)

    listing = cli("--unreferenced")
    assert listing.returncode == 0, listing.stderr
    assert all(storage.url(f.path) in listing.stdout for f in left) and f"found {len(left)} state file(s)" in listing.stdout
    assert {f"state/{rel}" for rel in storage.files_under("state")} == every_file  # listing deletes nothing

    deleting = cli("--delete-unreferenced")
    assert deleting.returncode == 0, deleting.stderr
    assert f"deleted {len(left)} state file(s)" in deleting.stdout
    assert {f"state/{rel}" for rel in storage.files_under("state")} == every_file - {f.path for f in left}
    for checkpoint in retained:  # every retained checkpoint still has all its files, intact
        verify_manifest(storage, checkpoint["manifest"])
    assert unreferenced_state_files(store, storage, "leftovers") == []
