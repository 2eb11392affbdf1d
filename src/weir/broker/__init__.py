"""weir.broker: topics, partitions and consumers as live objects; protocol-agnostic.

Fronts (YDB Topic API, native protocol) translate their wire messages into calls
on `Broker`; the broker turns them into storage changes committed through the
group committer.
"""
