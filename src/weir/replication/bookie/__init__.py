"""The bookie: stores ledger entries, durable before they are acknowledged."""
