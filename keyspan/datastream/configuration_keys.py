"""The Flink configuration keys ``StreamExecutionEnvironment.configure`` reads, and how."""

from __future__ import annotations

import re

_UNITS_MS = {"ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000,
             "secs": 1000, "second": 1000, "seconds": 1000, "min": 60_000, "m": 60_000, "minute": 60_000,
             "minutes": 60_000, "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "d": 86_400_000,
             "day": 86_400_000, "days": 86_400_000}


def duration_ms(key: str, text: str) -> int:
    """Flink's duration syntax: ``500``, ``500 ms``, ``10 s``, ``1min``, ``2 h`` (a bare number is ms)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or (m.group(2) and m.group(2).lower() not in _UNITS_MS):
        raise ValueError(f"configuration key '{key}': cannot read {text!r} as a duration (e.g. '10 s', '500 ms')")
    return int(m.group(1)) * _UNITS_MS[m.group(2).lower() or "ms"]


_UNITS_BYTES = {"": 1, "b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "kibibytes": 1 << 10, "m": 1 << 20,
                "mb": 1 << 20, "mebibytes": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gibibytes": 1 << 30,
                "t": 1 << 40, "tb": 1 << 40, "tebibytes": 1 << 40}


def memory_bytes(key: str, text: str) -> int:
    """Flink's memory size syntax: ``16mb``, ``16 m``, ``512 kb``, ``1g`` (a bare number is bytes)."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS_BYTES:
        raise ValueError(f"configuration key '{key}': cannot read {text!r} as a memory size (e.g. '16 mb', '1 gb')")
    return int(m.group(1)) * _UNITS_BYTES[m.group(2).lower()]


def _positive(key: str, text: str) -> int:
    if not str(text).strip().isdigit() or int(text) < 1:
        raise ValueError(f"configuration key '{key}': {text!r} is not a positive whole number")
    return int(text)


ADAPTIVE_BATCH = "execution.batch.adaptive.auto-parallelism."


def _backend(key: str, name: str):
    from keyspan.state.heap import HashMapStateBackend
    from keyspan.state.rocksdb import EmbeddedRocksDBStateBackend

    kinds = {"hashmap": HashMapStateBackend, "heap": HashMapStateBackend, "memory": HashMapStateBackend,
             "filesystem": HashMapStateBackend, "rocksdb": EmbeddedRocksDBStateBackend}
    if name.lower() not in kinds:
        raise ValueError(f"configuration key '{key}': unknown state backend {name!r}; use 'hashmap' or 'rocksdb'")
    return kinds[name.lower()]()


def _mode(key: str, name: str):
    from keyspan.datastream.execution_mode import RuntimeExecutionMode

    try:
        return RuntimeExecutionMode[name.upper()]
    except KeyError:
        raise ValueError(f"configuration key '{key}': {name!r} is not STREAMING, BATCH or AUTOMATIC") from None


def _flag(key: str, text: str) -> bool:
    value = str(text).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"configuration key '{key}': {text!r} is not true or false")
    return value == "true"


def _list(text: str) -> list[str]:
    return [p for p in re.split(r"[;,]", text) if p.strip()]


# key → how it changes the environment; several keys are Flink 1.x/2.x spellings of one setting
SUPPORTED = {
    "parallelism.default": lambda env, k, v: env.set_parallelism(int(v)),
    "pipeline.max-parallelism": lambda env, k, v: env.set_max_parallelism(int(v)),
    "execution.runtime-mode": lambda env, k, v: env.set_runtime_mode(_mode(k, v)),
    "execution.checkpointing.interval": lambda env, k, v: env.enable_checkpointing(duration_ms(k, v)),
    "execution.checkpointing.min-pause":
        lambda env, k, v: env.get_checkpoint_config().set_min_pause_between_checkpoints(duration_ms(k, v)),
    "execution.checkpointing.timeout":
        lambda env, k, v: env.get_checkpoint_config().set_checkpoint_timeout(duration_ms(k, v)),
    "execution.checkpointing.tolerable-failed-checkpoints":
        lambda env, k, v: env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(int(v)),
    "execution.checkpointing.max-concurrent-checkpoints":
        lambda env, k, v: env.get_checkpoint_config().set_max_concurrent_checkpoints(_positive(k, v)),
    "execution.checkpointing.mode": lambda env, k, v: env.get_checkpoint_config().set_checkpointing_mode(str(v)),
    "state.backend.type": lambda env, k, v: env.set_state_backend(_backend(k, v)),
    "state.backend": lambda env, k, v: env.set_state_backend(_backend(k, v)),
    "state.checkpoints.dir": lambda env, k, v: env.get_checkpoint_config().set_checkpoint_storage_dir(v),
    "execution.checkpointing.dir": lambda env, k, v: env.get_checkpoint_config().set_checkpoint_storage_dir(v),
    "state.checkpoints.num-retained":
        lambda env, k, v: env.get_checkpoint_config().set_num_retained_checkpoints(int(v)),
    "execution.checkpointing.num-retained":
        lambda env, k, v: env.get_checkpoint_config().set_num_retained_checkpoints(int(v)),
    "pipeline.jars": lambda env, k, v: env.add_jars(*_list(v)),
    "pipeline.classpaths": lambda env, k, v: env.add_classpaths(*_list(v)),
    "python.files": lambda env, k, v: [env.add_python_file(f) for f in _list(v)],
    "python.archives": lambda env, k, v: [env.add_python_archive(*e.split("#", 1)) for e in _list(v)],
    "python.requirements": lambda env, k, v: env.set_python_requirements(*v.split("#", 1)),
    "python.executable": lambda env, k, v: env.set_python_executable(v),
    "python.client.executable": lambda env, k, v: None,  # the driver is the Python that runs the job
    "pipeline.name": lambda env, k, v: None,  # execute(job_name) names the job
    "pipeline.auto-generate-uids": lambda env, k, v: (env.get_config().enable_auto_generated_uids()
                                                      if _flag(k, v) else env.get_config().disable_auto_generated_uids()),
    "pipeline.object-reuse": lambda env, k, v: (env.get_config().enable_object_reuse()
                                                if _flag(k, v) else env.get_config().disable_object_reuse()),
    "pipeline.auto-watermark-interval":
        lambda env, k, v: env.get_config().set_auto_watermark_interval(duration_ms(k, v)),
    # read when a BATCH job is planned (keyspan.runtime.executor.adaptive_batch); checked here
    ADAPTIVE_BATCH + "enabled": lambda env, k, v: _flag(k, v),
    ADAPTIVE_BATCH + "min-parallelism": lambda env, k, v: _positive(k, v),
    ADAPTIVE_BATCH + "max-parallelism": lambda env, k, v: _positive(k, v),
    ADAPTIVE_BATCH + "default-source-parallelism": lambda env, k, v: _positive(k, v),
    ADAPTIVE_BATCH + "avg-data-volume-per-task": lambda env, k, v: _positive(k, memory_bytes(k, v)),
    "keyspan.small-epochs-in-driver.max-records": lambda env, k, v: env.set_small_epochs_in_driver(int(v)),
    "keyspan.small-epochs-read-in-driver.max-records":
        lambda env, k, v: env.set_small_epochs_read_in_driver(int(v)),
    "keyspan.vectorized-aggregation":
        lambda env, k, v: env.set_vectorized_aggregation(str(v).strip().lower() in ("true", "1", "yes", "on")),
    "keyspan.python-worker-per-subtask": lambda env, k, v: env.set_python_worker_per_subtask(_flag(k, v)),
}


def apply(env, configuration) -> None:
    data = configuration.to_dict() if hasattr(configuration, "to_dict") else dict(configuration)
    for key, value in data.items():
        handler = SUPPORTED.get(key)
        if handler is not None:
            handler(env, key, value)
