"""PyFlink's ``pyflink.datastream.formats.orc``: ``OrcBulkWriters.for_row_type`` for
``FileSink.for_bulk_format``, written with pyarrow (one ORC file per part file)."""

from __future__ import annotations

import pyarrow as pa

from keyspan.common.serialization import BulkWriterFactory
from keyspan.datastream.formats.arrow_rows import ArrowRowWriterFactory

__all__ = ["OrcBulkWriters"]

# ORC's writer settings (Flink passes ``writer_properties`` to ORC's Java writer) as pyarrow's options;
# ORC ignores keys it does not know, and so does keyspan
_COMPRESSIONS = {"NONE": "uncompressed", "ZLIB": "zlib", "SNAPPY": "snappy", "LZ4": "lz4", "ZSTD": "zstd"}
_SETTINGS = {
    "orc.compress.size": ("compression_block_size", int),
    "orc.stripe.size": ("stripe_size", int),
    "orc.row.index.stride": ("row_index_stride", int),
    "orc.bloom.filter.fpp": ("bloom_filter_fpp", float),
    "orc.block.padding.tolerance": ("padding_tolerance", float),
    "orc.dictionary.key.threshold": ("dictionary_key_size_threshold", float),
    "orc.compression.strategy": ("compression_strategy", str.lower),
    "orc.write.format": ("file_version", str),
}


def _writer_options(properties: dict, schema: pa.Schema) -> dict:
    """pyarrow's ``orc.write_table`` options from ORC's writer properties (ORC's default: ZLIB)."""
    compress = properties.get("orc.compress", "ZLIB").upper()
    if compress not in _COMPRESSIONS:
        raise ValueError(f"OrcBulkWriters: orc.compress={compress} is not supported by keyspan's ORC writer; "
                         f"use one of {', '.join(_COMPRESSIONS)}")
    options = {"compression": _COMPRESSIONS[compress]}
    for key, (option, convert) in _SETTINGS.items():
        if key in properties:
            try:
                options[option] = convert(properties[key])
            except ValueError:
                raise ValueError(f"OrcBulkWriters: {key}={properties[key]!r} is not a valid value") from None
    if properties.get("orc.bloom.filter.columns"):
        names = [n.strip() for n in properties["orc.bloom.filter.columns"].split(",") if n.strip()]
        unknown = [n for n in names if n not in schema.names]
        if unknown:
            raise ValueError(f"OrcBulkWriters: orc.bloom.filter.columns names {unknown}, which the row type "
                             f"does not have (its fields: {schema.names})")
        options["bloom_filter_columns"] = [schema.names.index(n) for n in names]
    return options


class _OrcRowWriterFactory(ArrowRowWriterFactory):
    builder = "OrcBulkWriters.for_row_type"

    def __init__(self, row_type, writer_properties: dict):
        super().__init__(row_type)
        self.options = _writer_options(writer_properties, self.schema)

    def write_table(self, table: pa.Table, out) -> None:
        import pyarrow.orc as orc

        orc.write_table(table, out, **self.options)


class OrcBulkWriters:
    @staticmethod
    def for_row_type(row_type, writer_properties=None, hadoop_config=None) -> BulkWriterFactory:
        """Rows of ``row_type`` (``DataTypes.ROW([...])`` or ``Types.ROW_NAMED``) as ORC files.
        ``writer_properties`` (a ``Configuration``) takes ORC's writer settings: ``orc.compress``
        (NONE, ZLIB — the default —, SNAPPY, LZ4, ZSTD), ``orc.stripe.size``, ``orc.compress.size``,
        ``orc.row.index.stride``, ``orc.bloom.filter.columns``, ``orc.bloom.filter.fpp`` and the like;
        ``hadoop_config`` is accepted and ignored (pyarrow writes the files)."""
        properties = writer_properties.to_dict() if writer_properties is not None else {}
        return _OrcRowWriterFactory(row_type, properties)
