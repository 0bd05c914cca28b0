"""Connectors with PyFlink's module paths (``pyflink.datastream.connectors``)."""
