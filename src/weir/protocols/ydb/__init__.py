"""The YDB Topic API front: the unmodified ``ydb`` Python SDK as a client of weir.

`front.install` registers Discovery, Auth and Topic servicers on the server's
grpc.aio server. The generated messages come from the installed SDK (`protos`);
each module here is one concept: statuses, auth, discovery, the unary topic
calls, the write stream, the read stream, and the conversions between YDB
messages and weir batches. See docs/ydb.md for what works and what differs from
a real YDB.
"""
