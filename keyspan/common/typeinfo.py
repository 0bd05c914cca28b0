"""``Types``: PyFlink's type declarations, mapped to Arrow types for typed columns."""

from __future__ import annotations

import decimal
from enum import Enum

import pyarrow as pa


class TypeInformation:
    """``name`` is keyspan's own spelling of the type (``LONG``, ``ROW<a: INT>``): savepoints record it as
    a state's type, so it never changes; ``repr`` is PyFlink's (``Long``, ``RowTypeInfo(a: Integer)``)."""

    def __init__(self, name: str, arrow_type=None):
        self.name = name
        self.arrow_type = arrow_type

    def __repr__(self):
        return self.name

    def __eq__(self, other):
        return isinstance(other, TypeInformation) and self.name == other.name

    def __hash__(self):
        return hash(self.name)


class RowTypeInfo(TypeInformation):
    def __init__(self, field_types, field_names=None):
        self.field_types = list(field_types)
        self._named = bool(field_names)
        self.field_names = list(field_names) if field_names else [f"f{i}" for i in range(len(self.field_types))]
        super().__init__("ROW<" + ", ".join(f"{n}: {t.name}" for n, t in zip(self.field_names, self.field_types)) + ">")

    def get_field_names(self):
        return self.field_names

    def get_field_index(self, field_name: str) -> int:
        """The field's position (ValueError for a name the row does not have, as in PyFlink)."""
        return self.field_names.index(field_name)

    def get_field_types(self):
        return self.field_types

    def __eq__(self, other):
        """Rows of the same field types are equal whatever their field names, as in PyFlink."""
        return isinstance(other, RowTypeInfo) and self.field_types == other.field_types

    def __hash__(self):
        return hash(tuple(self.field_types))

    def __repr__(self):
        fields = (f"{n}: {t!r}" if self._named else repr(t) for n, t in zip(self.field_names, self.field_types))
        return "RowTypeInfo(" + ", ".join(fields) + ")"


class RowDataTypeInfo(RowTypeInfo):
    """Flink's internal row type (``InternalTypeInfo`` of ``RowData``): the records a table format's reader
    gives, such as ``CsvReaderFormat``'s. Python functions get them as named ``Row``s, as rows of the
    same fields; ``print()`` shows them as Java's ``GenericRowData`` does (``+I(ann,3,true)``)."""


class TupleTypeInfo(TypeInformation):
    def __init__(self, field_types):
        self.field_types = list(field_types)
        super().__init__("TUPLE<" + ", ".join(t.name for t in self.field_types) + ">", None)

    def get_field_types(self):
        return self.field_types

    def __repr__(self):
        return "TupleTypeInfo(" + ", ".join(repr(t) for t in self.field_types) + ")"


class ListTypeInfo(TypeInformation):
    def __init__(self, element_type):
        self.element_type = element_type
        super().__init__(f"LIST<{element_type.name}>", pa.list_(element_type.arrow_type) if element_type.arrow_type else None)

    def __eq__(self, other):
        """A list and the three kinds of array are different types of the same elements, as in PyFlink."""
        return type(other) is type(self) and self.element_type == other.element_type

    def __hash__(self):
        return hash((type(self).__name__, self.element_type))

    def __repr__(self):
        return f"{type(self).__name__}<{self.element_type!r}>"


class MapTypeInfo(TypeInformation):
    def __init__(self, key_type_info, value_type_info):  # PyFlink's parameter names
        key_type = self.key_type = key_type_info
        value_type = self.value_type = value_type_info
        arrow = pa.map_(key_type.arrow_type, value_type.arrow_type) if key_type.arrow_type and value_type.arrow_type else None
        super().__init__(f"MAP<{key_type.name}, {value_type.name}>", arrow)

    def __repr__(self):
        return f"MapTypeInfo<{self.key_type!r}, {self.value_type!r}>"


class BasicTypeInfo(TypeInformation):
    """Strings, booleans, numbers, chars and instants (``Types.STRING()`` … build these)."""

    _PYFLINK_NAMES = {"STRING": "String", "BYTE": "Byte", "BOOLEAN": "Boolean", "SHORT": "Short", "INT": "Integer",
                      "LONG": "Long", "FLOAT": "Float", "DOUBLE": "Double", "CHAR": "Char", "BIG_INT": "BigInteger",
                      "BIG_DEC": "BigDecimal", "INSTANT": "Instant"}

    def __repr__(self):
        return self._PYFLINK_NAMES[self.name]

    @staticmethod
    def STRING_TYPE_INFO():
        return BasicTypeInfo("STRING", pa.string())

    @staticmethod
    def BOOLEAN_TYPE_INFO():
        return BasicTypeInfo("BOOLEAN", pa.bool_())

    @staticmethod
    def BYTE_TYPE_INFO():
        return BasicTypeInfo("BYTE", pa.int8())

    @staticmethod
    def SHORT_TYPE_INFO():
        return BasicTypeInfo("SHORT", pa.int16())

    @staticmethod
    def INT_TYPE_INFO():
        return BasicTypeInfo("INT", pa.int32())

    @staticmethod
    def LONG_TYPE_INFO():
        return BasicTypeInfo("LONG", pa.int64())

    @staticmethod
    def FLOAT_TYPE_INFO():
        return BasicTypeInfo("FLOAT", pa.float32())

    @staticmethod
    def DOUBLE_TYPE_INFO():
        return BasicTypeInfo("DOUBLE", pa.float64())

    @staticmethod
    def CHAR_TYPE_INFO():
        return BasicTypeInfo("CHAR", pa.string())

    @staticmethod
    def BIG_INT_TYPE_INFO():
        return BasicTypeInfo("BIG_INT", None)

    @staticmethod
    def BIG_DEC_TYPE_INFO():
        return BasicTypeInfo("BIG_DEC", None)

    @staticmethod
    def INSTANT_TYPE_INFO():
        """Values are ``keyspan.common.Instant``s (pickled, as PyFlink's Python objects of this type)."""
        return InstantTypeInfo("INSTANT", None)


class DecimalTypeInfo(BasicTypeInfo):
    """``DataTypes.DECIMAL(precision, scale)``: a ``BIG_DEC`` whose values Flink keeps at ``scale``
    digits after the point (rounded half up), and as null when they need more than ``precision`` digits."""

    def __init__(self, precision: int, scale: int):
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(f"DECIMAL({precision}, {scale}): the precision must be 1 to 38 and the scale 0 to the precision")
        super().__init__("BIG_DEC", None)
        self.precision = precision
        self.scale = scale

    def fitted(self, value: decimal.Decimal) -> decimal.Decimal | None:
        """``value`` as Flink's ``DecimalData.fromBigDecimal`` keeps it."""
        context = decimal.Context(prec=self.precision + 1 + max(0, value.adjusted()), rounding=decimal.ROUND_HALF_UP)
        fitted = value.quantize(decimal.Decimal(1).scaleb(-self.scale), context=context)
        return fitted if len(fitted.as_tuple().digits) <= self.precision else None


class InstantTypeInfo(BasicTypeInfo):
    pass


class SqlTimeTypeInfo(TypeInformation):
    """``datetime.date``, ``datetime.time`` and ``datetime.datetime`` values."""

    def __repr__(self):
        return type(self).__name__

    @staticmethod
    def DATE():
        return DateTypeInfo()

    @staticmethod
    def TIME():
        return TimeTypeInfo()

    @staticmethod
    def TIMESTAMP():
        return TimestampTypeInfo()


class DateTypeInfo(SqlTimeTypeInfo):
    def __init__(self):
        super().__init__("SQL_DATE", pa.date32())


class TimeTypeInfo(SqlTimeTypeInfo):
    def __init__(self):
        super().__init__("SQL_TIME", pa.time64("us"))


class TimestampTypeInfo(SqlTimeTypeInfo):
    def __init__(self):
        super().__init__("SQL_TIMESTAMP", pa.timestamp("us"))


class LocalTimeTypeInfo(TypeInformation):
    """``datetime.date``, ``datetime.time`` and ``datetime.datetime`` values without a time zone, as
    Java's ``LocalDate``, ``LocalTime`` and ``LocalDateTime``."""

    class TimeType(Enum):
        LOCAL_DATE = 0
        LOCAL_TIME = 1
        LOCAL_DATE_TIME = 2

    def __init__(self, time_type: "LocalTimeTypeInfo.TimeType"):
        arrow = {self.TimeType.LOCAL_DATE: pa.date32(), self.TimeType.LOCAL_TIME: pa.time64("us"),
                 self.TimeType.LOCAL_DATE_TIME: pa.timestamp("us")}[time_type]
        super().__init__(time_type.name, arrow)
        self._time_type = time_type

    def __repr__(self):
        return f"LocalTimeTypeInfo<{self.name}>"


class PickledBytesTypeInfo(TypeInformation):
    """Any Python object (pickled): a stream that declares no type."""

    def __init__(self):
        super().__init__("PICKLED_BYTE_ARRAY", None)

    def __repr__(self):
        return "PickledByteArrayTypeInfo"

    @staticmethod
    def PICKLED_BYTE_ARRAY_TYPE_INFO():
        return PickledBytesTypeInfo()


class PrimitiveArrayTypeInfo(ListTypeInfo):
    """A list of numbers, booleans or chars (bytes for ``BYTE``)."""


class BasicArrayTypeInfo(ListTypeInfo):
    """A list of basic values."""


class ObjectArrayTypeInfo(ListTypeInfo):
    """A list of values of any one type."""


class Types:
    """Factory methods named as in ``pyflink.common.typeinfo.Types``."""

    @staticmethod
    def STRING():
        return BasicTypeInfo.STRING_TYPE_INFO()

    @staticmethod
    def BYTE():
        return BasicTypeInfo.BYTE_TYPE_INFO()

    @staticmethod
    def BOOLEAN():
        return BasicTypeInfo.BOOLEAN_TYPE_INFO()

    @staticmethod
    def SHORT():
        return BasicTypeInfo.SHORT_TYPE_INFO()

    @staticmethod
    def INT():
        return BasicTypeInfo.INT_TYPE_INFO()

    @staticmethod
    def LONG():
        return BasicTypeInfo.LONG_TYPE_INFO()

    @staticmethod
    def FLOAT():
        return BasicTypeInfo.FLOAT_TYPE_INFO()

    @staticmethod
    def DOUBLE():
        return BasicTypeInfo.DOUBLE_TYPE_INFO()

    @staticmethod
    def CHAR():
        return BasicTypeInfo.CHAR_TYPE_INFO()

    @staticmethod
    def BIG_INT():
        return BasicTypeInfo.BIG_INT_TYPE_INFO()

    @staticmethod
    def BIG_DEC():
        return BasicTypeInfo.BIG_DEC_TYPE_INFO()

    @staticmethod
    def SQL_DATE():
        return SqlTimeTypeInfo.DATE()

    @staticmethod
    def SQL_TIMESTAMP():
        return SqlTimeTypeInfo.TIMESTAMP()

    @staticmethod
    def SQL_TIME():
        return SqlTimeTypeInfo.TIME()

    @staticmethod
    def INSTANT():
        """Values are ``keyspan.common.Instant``s (pickled, as PyFlink's Python objects of this type)."""
        return BasicTypeInfo.INSTANT_TYPE_INFO()

    @staticmethod
    def PICKLED_BYTE_ARRAY():
        return PickledBytesTypeInfo()

    @staticmethod
    def PRIMITIVE_ARRAY(element_type):
        return PrimitiveArrayTypeInfo(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type):
        return BasicArrayTypeInfo(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type):
        return ObjectArrayTypeInfo(element_type)

    @staticmethod
    def LIST(element_type_info):
        return ListTypeInfo(element_type_info)

    @staticmethod
    def MAP(key_type_info, value_type_info):
        return MapTypeInfo(key_type_info, value_type_info)

    @staticmethod
    def ROW(field_types):
        return RowTypeInfo(field_types)

    @staticmethod
    def ROW_NAMED(field_names, field_types):
        return RowTypeInfo(field_types, field_names)

    @staticmethod
    def TUPLE(field_types):
        return TupleTypeInfo(field_types)
