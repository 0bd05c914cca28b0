"""PyFlink's Table API (``pyflink.table``) is not part of keyspan; only its ``DataTypes`` are, for the
DataStream APIs that take them. Any other name says what to use instead."""

from keyspan.table.types import DataTypes

__all__ = ["DataTypes"]

_TABLE_API = ("the Table API (pyflink.table: StreamTableEnvironment, TableEnvironment, Table, SQL); use Spark SQL "
              "on a streaming DataFrame and hand it to the DataStream API with env.from_spark(dataframe) instead")


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    from keyspan.common.unsupported import NotSupportedError

    raise NotSupportedError(f"not supported by keyspan: {_TABLE_API}")
