"""PyFlink names keyspan cannot provide fail with what to use instead, not with AttributeError."""

from __future__ import annotations


class NotSupportedError(ImportError):
    """``from keyspan.x import Name`` of a PyFlink name keyspan does not have (an ImportError, so a
    job's ``try: ... except ImportError`` fallback still works)."""


def module_getattr(module: str, unsupported: dict[str, str]):
    """A module ``__getattr__`` raising ``NotSupportedError`` for the names in ``unsupported``
    (name → what to use instead) and the usual AttributeError otherwise."""

    def __getattr__(name: str):
        if name in unsupported:
            raise NotSupportedError(f"not supported by keyspan: {module}.{name}; {unsupported[name]}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    return __getattr__


def unsupported_module(module: str, instead: str):
    """Raised by a PyFlink module keyspan has no counterpart for, on import."""
    return NotSupportedError(f"not supported by keyspan: {module}; {instead}")


# what to use instead of a connector keyspan does not have
INSTEAD_OF_A_SINK = ("write with add_sink(SinkFunction) and the system's Python client (records arrive after each "
                     "checkpoint commits)")
INSTEAD_OF_A_SOURCE = ("read it with env.from_spark(spark.readStream.format(...)) and a Spark connector for the system, "
                       "or use Kafka")
INSTEAD_OF_DYNAMIC_KAFKA = "use KafkaSource with set_topics(...) or set_topic_pattern(...) per cluster, and union the streams"
