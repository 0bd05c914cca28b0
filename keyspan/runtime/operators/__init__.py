"""Operators the runtime builds from the API's descriptors (PyFlink builds its window operator from
``WindowOperationDescriptor`` the same way)."""

from keyspan.datastream.window import WindowOperationDescriptor
from keyspan.runtime.operators.vectorized import vectorized
from keyspan.runtime.operators.window import WindowOperator

__all__ = ["WindowOperator", "runtime_function"]


def runtime_function(fn, vectorize: bool = True):
    """The function the runtime runs for a transformation's ``fn``: an operator for a descriptor, the
    columnar operator of a known aggregation when ``vectorize`` (docs/aggregations.md)."""
    fast = vectorized(fn) if vectorize else None
    if fast is not None:
        return fast
    if isinstance(fn, WindowOperationDescriptor):
        return WindowOperator(fn)
    return fn
