"""PyFlink's ``pyflink.datastream.utils``: ``ResultTypeQueryable``."""

from __future__ import annotations

from abc import abstractmethod


class ResultTypeQueryable:
    """An input that declares the type of the records it produces (``env.create_input`` gives the
    stream that type)."""

    @abstractmethod
    def get_produced_type(self):
        ...
