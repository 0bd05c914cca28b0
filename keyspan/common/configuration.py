"""A string-keyed configuration map, as ``pyflink.common.Configuration``."""

from __future__ import annotations

import base64


class Configuration:
    def __init__(self, other: "Configuration | None" = None):
        self._data: dict[str, str] = dict(other._data) if other else {}

    def set_string(self, key: str, value: str) -> "Configuration":
        self._data[key] = str(value)
        return self

    def get_string(self, key: str, default_value: str | None = None) -> str | None:
        return self._data.get(key, default_value)

    def set_integer(self, key: str, value: int) -> "Configuration":
        return self.set_string(key, str(int(value)))

    def get_integer(self, key: str, default_value: int = 0) -> int:
        v = self._data.get(key)
        return default_value if v is None else int(v)

    def set_boolean(self, key: str, value: bool) -> "Configuration":
        return self.set_string(key, "true" if value else "false")

    def get_boolean(self, key: str, default_value: bool = False) -> bool:
        v = self._data.get(key)
        return default_value if v is None else v.lower() == "true"

    def set_float(self, key: str, value: float) -> "Configuration":
        return self.set_string(key, repr(float(value)))

    def get_float(self, key: str, default_value: float = 0.0) -> float:
        v = self._data.get(key)
        return default_value if v is None else float(v)

    def set_bytearray(self, key: str, value: bytearray) -> "Configuration":
        """Stored as base64 text, as Flink writes bytes into its string-valued configuration."""
        return self.set_string(key, base64.b64encode(bytes(value)).decode("ascii"))

    def get_bytearray(self, key: str, default_value: bytearray | None = None) -> bytearray | None:
        v = self._data.get(key)
        return default_value if v is None else bytearray(base64.b64decode(v))

    def contains_key(self, key: str) -> bool:
        return key in self._data

    def key_set(self) -> set[str]:
        return set(self._data)

    def remove_config(self, key: str) -> bool:
        return self._data.pop(key, None) is not None

    def add_all(self, other: "Configuration", prefix: str | None = None) -> "Configuration":
        """Every entry of ``other``, its key prefixed with ``prefix`` when given."""
        for key, value in other._data.items():
            self._data[(prefix or "") + key] = value
        return self

    def add_all_to_dict(self, target_dict: dict) -> None:
        target_dict.update(self._data)

    @classmethod
    def from_dict(cls, map: dict) -> "Configuration":
        conf = cls()
        for key, value in map.items():
            conf.set_string(key, value)
        return conf

    @staticmethod
    def parse_list_value(value: str) -> list:
        """A list option's text: ``[a, b]`` (a YAML flow list) or ``a;b`` (Flink's separator)."""
        if not value:
            return []
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            return [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
        return value.split(";")

    def __eq__(self, other):
        return isinstance(other, Configuration) and self._data == other._data

    def __hash__(self):
        return hash(frozenset(self._data.items()))

    def to_dict(self) -> dict[str, str]:
        return dict(self._data)

    def __repr__(self):
        return f"Configuration({self._data})"
