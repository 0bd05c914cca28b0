"""Encoders for row-format file sinks (``pyflink.common.serialization``)."""

from __future__ import annotations


class Encoder:
    """Turns a record into the bytes of one line of a row-format file."""

    def __init__(self, encode):
        self._encode = encode

    def encode(self, value) -> bytes:
        return self._encode(value)

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> "Encoder":
        return Encoder(lambda value: (str(value) + "\n").encode(charset_name))


class SimpleStringSchema:
    def __init__(self, charset: str = "UTF-8"):
        self.charset = charset

    def serialize(self, value) -> bytes:
        return str(value).encode(self.charset)

    def deserialize(self, data: bytes) -> str:
        return data.decode(self.charset)
