"""weir.storage: the PQ tablet on LMDB. No asyncio, no gRPC, no topics.

Kept free of eager imports so that `weir.storage.batch` (the wire format) can be
used by clients without loading LMDB.
"""
