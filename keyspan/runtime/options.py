"""Run options that come from outside the job file: the CLI, environment variables, defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from keyspan.common.settings import load as load_settings


@dataclass
class RunOptions:
    workdir: str = field(default_factory=lambda: load_settings().workdir)
    parallelism: int | None = None
    checkpoint_dir: str | None = None
    metadata_url: str | None = field(default_factory=lambda: load_settings().metadata_url)
    fresh: bool = False
    job_file: str | None = None
    progress: bool = False
    spark_master: str | None = field(default_factory=lambda: load_settings().spark_master)
    savepoint_path: str | None = None
    allow_non_restored_state: bool = False
    rest_api: bool = True
    spark_conf: dict = field(default_factory=dict)  # `--conf k=v`: set on the session keyspan builds
    configuration: dict = field(default_factory=dict)  # `-D key=value`: Flink configuration keys, over the job's
    spark_ui: bool = True
    # driver-local file:// checkpoints/savepoints on a multi-host cluster: only if that path is a shared mount
    allow_local_storage: bool = field(default_factory=lambda: load_settings().allow_local_storage)
    restart_attempts: int | None = None  # `--restart-attempts`: the fall-back restart strategy
    restart_delay_s: float = 10.0
    code_dir: str | None = None  # the job's folder: its sibling modules are shipped to the executors
    autoscale: tuple[int, int] | None = None  # `--autoscale MIN..MAX`: the autoscaler on, with these bounds
    launch: dict | None = None  # how the CLI started this run (options, arguments, cwd): rescale reuses it

    def savepoint_root(self) -> str:
        return load_settings().savepoint_dir or \
            "file://" + os.path.join(os.path.abspath(self.workdir), "savepoints")

    def checkpoint_root(self) -> str:
        return self.checkpoint_dir or load_settings().checkpoint_dir or \
            "file://" + os.path.join(os.path.abspath(self.workdir), "checkpoints")

    def metadata(self) -> str:
        from keyspan.checkpoint.metadata import default_url

        return self.metadata_url or default_url(self.workdir)


_current = RunOptions()


def current() -> RunOptions:
    return _current


def install(options: RunOptions) -> None:
    """The CLI installs its options before running the job file."""
    global _current
    _current = options
