"""The headers that mark a chunk of a chunked message (Pulsar's chunking, `weir.client.chunks`).

Shared by the SDK (which writes and reassembles chunks) and the storage layer (compaction
keeps a chunked message whole), so it depends on nothing.
"""

from __future__ import annotations

CHUNK_UUID = "weir.chunk.uuid"
CHUNK_ID = "weir.chunk.id"
CHUNK_COUNT = "weir.chunk.count"
