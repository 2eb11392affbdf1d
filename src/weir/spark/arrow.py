"""Stored weir batches to Arrow: the conversion lives in `weir.storage.arrow_rows`, shared
with the tier's Parquet files; Spark's readers use it from here."""

from weir.storage.arrow_rows import stored_to_arrow

__all__ = ["stored_to_arrow"]
