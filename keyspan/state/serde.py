"""Old import path of :mod:`keyspan.io.serde`, kept for code written against earlier releases."""

from keyspan.io.serde import (  # noqa: F401
    StateSerializationError,
    dump_state,
    dumps,
    dumps_function,
    dumps_state,
    loads,
    ship_user_modules,
)
