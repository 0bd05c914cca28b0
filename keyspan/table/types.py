"""``pyflink.table.types.DataTypes``, for the DataStream APIs that take a data type (``CsvSchema``'s
columns). keyspan has no Table API: each data type here is the ``TypeInformation`` of the same
Python values, so it also works wherever a ``Types.*`` is expected."""

from __future__ import annotations

from keyspan.common.typeinfo import DecimalTypeInfo, Types

__all__ = ["DataTypes", "DataField"]


class DataField:
    """A named field of ``DataTypes.ROW``."""

    def __init__(self, name: str, data_type, description: str | None = None):
        self.name = name
        self.data_type = data_type
        self.description = description

    def __repr__(self):
        return f"DataField({self.name!r}, {self.data_type!r})"


class DataTypes:
    # nullability, lengths and time precisions do not change the Python values, so they are accepted as given;
    # a DECIMAL's precision and scale do (Flink rounds to the scale)
    @staticmethod
    def CHAR(length: int = 1, nullable: bool = True):
        return Types.STRING()

    @staticmethod
    def VARCHAR(length: int = 2147483647, nullable: bool = True):
        return Types.STRING()

    @staticmethod
    def STRING(nullable: bool = True):
        return Types.STRING()

    @staticmethod
    def BOOLEAN(nullable: bool = True):
        return Types.BOOLEAN()

    @staticmethod
    def BINARY(length: int = 1, nullable: bool = True):
        return Types.PRIMITIVE_ARRAY(Types.BYTE())

    @staticmethod
    def VARBINARY(length: int = 2147483647, nullable: bool = True):
        return Types.PRIMITIVE_ARRAY(Types.BYTE())

    @staticmethod
    def BYTES(nullable: bool = True):
        return Types.PRIMITIVE_ARRAY(Types.BYTE())

    @staticmethod
    def DECIMAL(precision: int, scale: int, nullable: bool = True):
        return DecimalTypeInfo(precision, scale)

    @staticmethod
    def TINYINT(nullable: bool = True):
        return Types.BYTE()

    @staticmethod
    def SMALLINT(nullable: bool = True):
        return Types.SHORT()

    @staticmethod
    def INT(nullable: bool = True):
        return Types.INT()

    @staticmethod
    def BIGINT(nullable: bool = True):
        return Types.LONG()

    @staticmethod
    def FLOAT(nullable: bool = True):
        return Types.FLOAT()

    @staticmethod
    def DOUBLE(nullable: bool = True):
        return Types.DOUBLE()

    @staticmethod
    def DATE(nullable: bool = True):
        return Types.SQL_DATE()

    @staticmethod
    def TIME(precision: int = 0, nullable: bool = True):
        return Types.SQL_TIME()

    @staticmethod
    def TIMESTAMP(precision: int = 6, nullable: bool = True):
        return Types.SQL_TIMESTAMP()

    @staticmethod
    def TIMESTAMP_LTZ(precision: int = 6, nullable: bool = True):
        return Types.INSTANT()

    @staticmethod
    def ARRAY(element_type, nullable: bool = True):
        return Types.LIST(element_type)

    @staticmethod
    def MAP(key_type, value_type, nullable: bool = True):
        return Types.MAP(key_type, value_type)

    @staticmethod
    def FIELD(name: str, data_type, description: str | None = None) -> DataField:
        return DataField(name, data_type, description)

    @staticmethod
    def ROW(row_fields=None, nullable: bool = True):
        fields = list(row_fields or [])
        return Types.ROW_NAMED([f.name for f in fields], [f.data_type for f in fields])
