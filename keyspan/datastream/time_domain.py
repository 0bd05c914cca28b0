"""``TimeDomain`` as in ``pyflink.datastream.time_domain``."""

from keyspan.datastream.functions import TimeDomain

__all__ = ["TimeDomain"]
