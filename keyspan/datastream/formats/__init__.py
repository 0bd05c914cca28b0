"""Formats under PyFlink's module paths (``pyflink.datastream.formats``): ``json``, ``csv``,
``parquet``, ``avro``, ``orc``."""
