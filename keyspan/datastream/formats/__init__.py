"""Formats under PyFlink's module paths (``pyflink.datastream.formats``): ``json``, ``csv``,
``parquet`` (and ``avro`` when ``fastavro`` is installed)."""
