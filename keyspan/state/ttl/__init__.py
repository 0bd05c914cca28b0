"""State time-to-live, written once for both backends (Flink's ``runtime/state/ttl/``).

A TTL-enabled state keeps, with every value, the time it was last written (or, with
``OnReadAndWrite``, last read): a value/reducing/aggregating state keeps one :class:`TtlValue` per
key, a list state one per element, a map state one per entry. A value is expired when
``min(timestamp + ttl, Long.MAX) <= now``, as in Flink's ``TtlUtils.expired``. "Now" is the
backend's ``ttl_time_provider()`` (processing time, milliseconds) or, with the
``EventTime`` characteristic (a keyspan extension; Flink only has processing time), the backend's
``current_watermark``.

In checkpoints and savepoints (the backend-neutral section format) a TTL-enabled state's values are
``TtlValue`` objects in those same places, whichever backend wrote them; values of a state without
TTL are the plain user values. A backend converts between the two when a restored state is
registered with the other setting: plain values restored into a TTL-enabled state are stamped with
the time of the restore (the conversion is written with the next checkpoint, so the stamp sticks),
TTL'd values restored into a state without TTL lose their timestamps.

Modules: ``config`` (PyFlink's ``StateTtlConfig``), ``values`` (``TtlValue``, the clock, the
policy and the plain/TTL conversions of restored values) and ``states`` (the five TTL state
decorators over a backend's cells, see ``keyspan.state.internal``).
"""

from keyspan.state.ttl.config import StateTtlConfig
from keyspan.state.ttl.states import TTL_STATES
from keyspan.state.ttl.values import (
    LONG_MAX,
    LONG_MIN,
    TtlPolicy,
    TtlValue,
    needs_stamp,
    needs_unstamp,
    stamp,
    unstamp,
    wall_clock_ms,
)

__all__ = ["StateTtlConfig", "TtlValue", "TtlPolicy", "TTL_STATES", "LONG_MIN", "LONG_MAX", "wall_clock_ms",
           "stamp", "unstamp", "needs_stamp", "needs_unstamp"]
