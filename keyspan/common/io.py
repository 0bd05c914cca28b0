"""PyFlink's ``pyflink.common.io``: the base of input formats ``env.create_input`` reads."""

from __future__ import annotations


class InputFormat:
    """A bounded input that ``env.create_input`` reads through keyspan's file source
    (``file_source()``), e.g. ``AvroInputFormat``."""

    def file_source(self):
        raise NotImplementedError
