"""Operators the runtime builds from the API's descriptors (PyFlink builds its window operator from
``WindowOperationDescriptor`` the same way)."""

from keyspan.datastream.window import WindowOperationDescriptor
from keyspan.runtime.operators.vectorized import vectorized
from keyspan.runtime.operators.window import WindowOperator

__all__ = ["WindowOperator", "runtime_function"]


def runtime_function(fn, vectorize: bool = True, batch: bool = False):
    """The function the runtime runs for a transformation's ``fn``: its BATCH-mode form in a ``batch``
    job (a keyed reduction's ``in_batch_mode``), an operator for a descriptor, the columnar operator of
    a known aggregation when ``vectorize`` (docs/aggregations.md)."""
    if batch and hasattr(fn, "in_batch_mode"):
        return fn.in_batch_mode()
    fast = vectorized(fn) if vectorize else None
    if fast is not None:
        return fast
    if isinstance(fn, WindowOperationDescriptor):
        return WindowOperator(fn)
    return fn
