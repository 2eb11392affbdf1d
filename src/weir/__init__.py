"""weir: a durable, partitioned topic service."""

__version__ = "0.1.0"
