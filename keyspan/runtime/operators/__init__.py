"""Operators the runtime builds from the API's descriptors (PyFlink builds its window operator from
``WindowOperationDescriptor`` the same way)."""

from keyspan.datastream.window import WindowOperationDescriptor
from keyspan.runtime.operators.window import WindowOperator

__all__ = ["WindowOperator", "runtime_function"]


def runtime_function(fn):
    """The function the runtime runs for a transformation's ``fn``: an operator for a descriptor."""
    if isinstance(fn, WindowOperationDescriptor):
        return WindowOperator(fn)
    return fn
