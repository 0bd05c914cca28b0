"""``Types``: PyFlink's type declarations, mapped to Arrow types for typed columns."""

from __future__ import annotations

import pyarrow as pa


class TypeInformation:
    def __init__(self, name: str, arrow_type=None):
        self.name = name
        self.arrow_type = arrow_type

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, TypeInformation) and repr(self) == repr(other)

    def __hash__(self):
        return hash(repr(self))


class RowTypeInfo(TypeInformation):
    def __init__(self, field_types, field_names=None):
        self.field_types = list(field_types)
        self.field_names = list(field_names) if field_names else [f"f{i}" for i in range(len(self.field_types))]
        super().__init__("ROW", None)

    def get_field_names(self):
        return self.field_names

    def get_field_index(self, field_name: str) -> int:
        """The field's position (ValueError for a name the row does not have, as in PyFlink)."""
        return self.field_names.index(field_name)

    def get_field_types(self):
        return self.field_types

    def __repr__(self):
        return "ROW<" + ", ".join(f"{n}: {t!r}" for n, t in zip(self.field_names, self.field_types)) + ">"


class TupleTypeInfo(TypeInformation):
    def __init__(self, field_types):
        self.field_types = list(field_types)
        super().__init__("TUPLE", None)

    def get_field_types(self):
        return self.field_types

    def __repr__(self):
        return "TUPLE<" + ", ".join(repr(t) for t in self.field_types) + ">"


class ListTypeInfo(TypeInformation):
    def __init__(self, element_type):
        self.element_type = element_type
        super().__init__(f"LIST<{element_type!r}>", pa.list_(element_type.arrow_type) if element_type.arrow_type else None)


class MapTypeInfo(TypeInformation):
    def __init__(self, key_type, value_type):
        self.key_type = key_type
        self.value_type = value_type
        arrow = pa.map_(key_type.arrow_type, value_type.arrow_type) if key_type.arrow_type and value_type.arrow_type else None
        super().__init__(f"MAP<{key_type!r}, {value_type!r}>", arrow)


class Types:
    """Factory methods named as in ``pyflink.common.typeinfo.Types``."""

    @staticmethod
    def STRING():
        return TypeInformation("STRING", pa.string())

    @staticmethod
    def BYTE():
        return TypeInformation("BYTE", pa.int8())

    @staticmethod
    def BOOLEAN():
        return TypeInformation("BOOLEAN", pa.bool_())

    @staticmethod
    def SHORT():
        return TypeInformation("SHORT", pa.int16())

    @staticmethod
    def INT():
        return TypeInformation("INT", pa.int32())

    @staticmethod
    def LONG():
        return TypeInformation("LONG", pa.int64())

    @staticmethod
    def FLOAT():
        return TypeInformation("FLOAT", pa.float32())

    @staticmethod
    def DOUBLE():
        return TypeInformation("DOUBLE", pa.float64())

    @staticmethod
    def CHAR():
        return TypeInformation("CHAR", pa.string())

    @staticmethod
    def BIG_INT():
        return TypeInformation("BIG_INT", None)

    @staticmethod
    def BIG_DEC():
        return TypeInformation("BIG_DEC", None)

    @staticmethod
    def SQL_DATE():
        return TypeInformation("SQL_DATE", pa.date32())

    @staticmethod
    def SQL_TIMESTAMP():
        return TypeInformation("SQL_TIMESTAMP", pa.timestamp("us"))

    @staticmethod
    def SQL_TIME():
        return TypeInformation("SQL_TIME", pa.time64("us"))

    @staticmethod
    def INSTANT():
        """Values are ``keyspan.common.Instant``s (pickled, as PyFlink's Python objects of this type)."""
        return TypeInformation("INSTANT", None)

    @staticmethod
    def PICKLED_BYTE_ARRAY():
        return TypeInformation("PICKLED_BYTE_ARRAY", None)

    @staticmethod
    def PRIMITIVE_ARRAY(element_type):
        return ListTypeInfo(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type):
        return ListTypeInfo(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type):
        return ListTypeInfo(element_type)

    @staticmethod
    def LIST(element_type):
        return ListTypeInfo(element_type)

    @staticmethod
    def MAP(key_type, value_type):
        return MapTypeInfo(key_type, value_type)

    @staticmethod
    def ROW(field_types):
        return RowTypeInfo(field_types)

    @staticmethod
    def ROW_NAMED(field_names, field_types):
        return RowTypeInfo(field_types, field_names)

    @staticmethod
    def TUPLE(field_types):
        return TupleTypeInfo(field_types)
