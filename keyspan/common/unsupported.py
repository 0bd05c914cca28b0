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
