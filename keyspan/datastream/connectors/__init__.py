"""Connectors with PyFlink's module paths (``pyflink.datastream.connectors``)."""

from keyspan.datastream.connectors.base import DeliveryGuarantee  # noqa: E402,F401 — PyFlink exports it here too
