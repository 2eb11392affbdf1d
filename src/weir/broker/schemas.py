"""Schemas of topics (Pulsar's schema registry): each topic's list of schema versions.

A schema is what a producer or consumer declares its messages to be: a type (BYTES,
STRING, JSON, AVRO, KEY_VALUE, ... as Pulsar numbers them) and, for structured types,
a definition (an Avro record schema in JSON, for JSON and AVRO alike). The first
declared schema of a topic becomes its version 0; the same schema again gets the same
version; a schema the topic's versions cannot read, or a different type, is refused
with `IncompatibleSchemaError`. BYTES ("no schema") is always allowed: such clients
read and write raw bytes, as in Pulsar without schema validation enforced.

Compatibility for JSON and AVRO records is Pulsar's default (backward): a new version
may add fields that have a default, and drop fields; a field whose type changes, or a
new field without a default, is incompatible. Other types must match exactly.

Stored in the broker's ``schemas`` table (topic id -> JSON list of versions), written
in the group commit, dropped with the topic.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from weir.errors import BadRequestError
from weir.storage.kv import KV, Op, delete, put

SCHEMAS = "schemas"
_U32 = struct.Struct(">I")
NONE = 0  # Pulsar's Schema.Type None: raw bytes
KEY_VALUE = 15
RECORD_TYPES = frozenset({2, 4})  # JSON, AVRO
MAX_SCHEMA_BYTES = 1 << 20


class IncompatibleSchemaError(BadRequestError):
    code = "INCOMPATIBLE_SCHEMA"


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    type: int
    data: bytes = b""
    name: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def to_dict(self, version: int) -> dict[str, Any]:
        return {
            "version": version,
            "type": self.type,
            "name": self.name,
            "data": base64.b64encode(self.data).decode(),
            "properties": self.properties,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SchemaInfo:
        return cls(
            d["type"], base64.b64decode(d["data"]), d.get("name", ""), d.get("properties", {})
        )

    def same(self, other: SchemaInfo) -> bool:
        return self.type == other.type and self.data == other.data


def _fields(data: bytes) -> dict[str, dict[str, Any]] | None:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("fields"), list):
        return None
    return {f["name"]: f for f in doc["fields"] if isinstance(f, dict) and "name" in f}


def check_compatible(new: SchemaInfo, versions: Sequence[SchemaInfo]) -> None:
    """Raise IncompatibleSchemaError unless ``new`` can follow ``versions`` (the latest last)."""
    latest = versions[-1]
    if new.type != latest.type:
        raise IncompatibleSchemaError(
            f"schema type {new.type} is incompatible with the topic's schema type {latest.type}"
        )
    if new.type not in RECORD_TYPES:
        raise IncompatibleSchemaError(
            "the topic has another schema of this type; only JSON and AVRO records evolve"
        )
    old_fields, new_fields = _fields(latest.data), _fields(new.data)
    if old_fields is None or new_fields is None:
        raise IncompatibleSchemaError("schema definitions are not Avro record schemas")
    for name, f in new_fields.items():
        if name not in old_fields:
            if "default" not in f:
                raise IncompatibleSchemaError(
                    f"new field {name!r} has no default: readers of older messages cannot fill it"
                )
        elif json.dumps(f.get("type"), sort_keys=True) != json.dumps(
            old_fields[name].get("type"), sort_keys=True
        ):
            raise IncompatibleSchemaError(f"field {name!r} changes its type")


def admissible(schema: SchemaInfo) -> bool:
    """False for BYTES (no schema to keep); BadRequestError when too large."""
    if len(schema.data) > MAX_SCHEMA_BYTES:
        raise BadRequestError(f"schema of {len(schema.data)} bytes: at most {MAX_SCHEMA_BYTES}")
    return schema.type != NONE


def next_versions(
    vs: Sequence[SchemaInfo], schema: SchemaInfo
) -> tuple[int, list[SchemaInfo] | None]:
    """(version of ``schema``, the new list of versions or None when it is one already);
    IncompatibleSchemaError when the topic's versions cannot take it."""
    for i, v in enumerate(vs):
        if v.same(schema):
            return i, None
    if vs:
        check_compatible(schema, vs)
    return len(vs), [*vs, schema]


def encode_versions(vs: Sequence[SchemaInfo]) -> bytes:
    return json.dumps([s.to_dict(i) for i, s in enumerate(vs)]).encode()


def decode_versions(raw: bytes) -> list[SchemaInfo]:
    return [SchemaInfo.from_dict(d) for d in json.loads(raw)]


class SchemaRegistry:
    """The schema versions of every topic, by topic id."""

    def __init__(self, kv: KV, commit: Callable[[Sequence[Op]], Any]) -> None:
        self._kv = kv
        self._commit = commit
        self._versions: dict[int, list[SchemaInfo]] = {}
        self._lock = asyncio.Lock()

    def load(self) -> None:
        for k, v in self._kv.scan(SCHEMAS):
            (tid,) = _U32.unpack(bytes(k))
            self._versions[tid] = decode_versions(bytes(v))

    def versions(self, topic_id: int) -> list[SchemaInfo]:
        return list(self._versions.get(topic_id, ()))

    def get(self, topic_id: int, version: int | None = None) -> tuple[SchemaInfo, int] | None:
        """The topic's latest schema (or ``version``) and its version; None when it has none."""
        vs = self._versions.get(topic_id)
        if not vs:
            return None
        if version is None:
            return vs[-1], len(vs) - 1
        if 0 <= version < len(vs):
            return vs[version], version
        return None

    async def ensure(self, topic_id: int, schema: SchemaInfo) -> int | None:
        """The version of ``schema`` on the topic, adding it when compatible; None for BYTES."""
        if not admissible(schema):
            return None
        async with self._lock:
            vs = self._versions.get(topic_id, [])
            found, new = next_versions(vs, schema)
            if new is None:
                return found
            await self._commit([put(SCHEMAS, _U32.pack(topic_id), encode_versions(new))])
            self._versions[topic_id] = new
            return found

    async def delete(self, topic_id: int) -> None:
        async with self._lock:
            if self._versions.pop(topic_id, None) is not None:
                await self._commit([delete(SCHEMAS, _U32.pack(topic_id))])

    def drop_ops(self, topic_id: int) -> list[Op]:
        return [delete(SCHEMAS, _U32.pack(topic_id))] if topic_id in self._versions else []

    def forget(self, topic_id: int) -> None:
        self._versions.pop(topic_id, None)
