"""PyFlink's Table API (``pyflink.table``) is not part of keyspan: importing it says what to use."""

raise ImportError(
    "not supported by keyspan: the Table API (pyflink.table: StreamTableEnvironment, TableEnvironment, "
    "Table, SQL); use Spark SQL on a streaming DataFrame and hand it to the DataStream API with "
    "env.from_spark(dataframe) instead")
