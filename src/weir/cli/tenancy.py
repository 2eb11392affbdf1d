"""`weir tenant ...` and `weir namespace ...`: tenants, namespaces and their policies.

Policy values are typed as people write them: durations for ``*_ms`` keys ("7d",
"12h"), sizes for ``*_bytes`` keys ("10GiB"), on/off for switches, plain numbers for
counts, and "none" for no limit. The server checks every key and value; a bad one
changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from weir.cli import output
from weir.cli.common import (
    SERVER_DEFAULTS,
    CliError,
    Json,
    ServerOptions,
    bad,
    server_options,
)
from weir.config_values import parse_duration_ms, parse_size
from weir.errors import AlreadyExistsError

if TYPE_CHECKING:
    from weir.client.admin import NamespaceInfo, TenantInfo

tenant_app = typer.Typer(help="Create, list, describe and delete tenants.", no_args_is_help=True)
namespace_app = typer.Typer(
    help="Create, list, describe and delete namespaces; set the policies their topics inherit.",
    no_args_is_help=True,
)

TenantName = Annotated[str, typer.Argument(help="Tenant name, such as 'acme'.")]
NamespaceName = Annotated[
    str, typer.Argument(help="'tenant/namespace', or 'namespace' in the tenant 'public'.")
]
PolicyOption = Annotated[
    list[str] | None,
    typer.Option(
        "--policy",
        help="A policy as KEY=VALUE (repeat): retention_ms=7d, retention_bytes=10GiB, "
        "message_ttl_ms=1h, backlog_quota_bytes=1GiB, "
        "backlog_quota_policy=consumer_backlog_eviction, deduplication=off, max_message_bytes=1MiB, "
        "max_producers_per_topic=10, max_consumers_per_topic=10, default_partitions=4, "
        'auto_create_topics=off; "none" for no limit.',
    ),
]
_ON = {"on", "true", "yes", "1"}
_OFF = {"off", "false", "no", "0"}
_SWITCHES = {"deduplication", "auto_create_topics"}
_CHOICES = {"backlog_quota_policy"}  # a name, checked by the server


def policy_value(key: str, text: str, option: str = "--policy") -> Any:
    """The value of policy ``key`` typed as ``text`` (the server checks the key itself)."""
    t = text.strip()
    low = t.lower()
    if key in _SWITCHES:
        if low in _ON:
            return True
        if low in _OFF:
            return False
        raise bad(option, f"{key} is on or off, not {text!r}")
    if key in _CHOICES:
        return low
    if low == "none":
        return None
    try:
        if key.endswith("_ms"):
            return round(parse_duration_ms(int(t) if t.isdigit() else t))
        if key.endswith("_bytes"):
            return parse_size(int(t) if t.isdigit() else t)
        return int(t)
    except ValueError as exc:
        raise bad(option, f"{key}: {exc}") from None


def parse_policies(items: list[str] | None, option: str = "--policy") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise bad(option, f"expected KEY=VALUE, got {item!r}")
        out[key.strip()] = policy_value(key.strip(), value, option)
    return out


# ---------------------------------------------------------------------------- output


def _shown(key: str, value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if key.endswith("_ms"):
        return output.human_duration_ms(value)
    if key.endswith("_bytes"):
        return output.human_bytes(value)
    return str(value)


def show_policies(info: NamespaceInfo) -> None:
    table = Table(title=f"policies of {info.name}", title_justify="left")
    table.add_column("policy")
    table.add_column("value")
    table.add_column("from")
    for key, value in sorted(info.effective_policies.items()):
        table.add_row(key, _shown(key, value), "namespace" if key in info.policies else "server")
    output.stdout.print(table)


def show_namespace(info: NamespaceInfo) -> None:
    output.stdout.print(f"namespace {info.name} (tenant {info.tenant})")
    output.stdout.print(f"topics: {', '.join(info.topics) or '-'}")
    show_policies(info)


def namespace_json(info: NamespaceInfo) -> dict[str, Any]:
    return dataclasses.asdict(info)


def tenant_json(info: TenantInfo) -> dict[str, Any]:
    return dataclasses.asdict(info)


# ---------------------------------------------------------------------------- tenants


IfNotExists = Annotated[
    bool,
    typer.Option(
        "--if-not-exists",
        help="Succeed if it is already there (a namespace: with the policies given, else an "
        "error naming what differs). For scripts that may run twice.",
    ),
]


@tenant_app.command("create")
@server_options
def create_tenant(
    tenant: TenantName,
    if_not_exists: IfNotExists = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Create a tenant (then create namespaces in it)."""
    created = True
    with server.connect() as client:
        try:
            info = client.create_tenant(tenant, timeout=server.timeout)
        except AlreadyExistsError:
            if not if_not_exists:
                raise
            info, created = client.describe_tenant(tenant, timeout=server.timeout), False
    if json_out:
        output.print_json(tenant_json(info))
    else:
        output.stdout.print(
            f"{'created tenant' if created else 'tenant'} {info.name}"
            + ("" if created else " already exists")
        )


@tenant_app.command("list")
@server_options
def list_tenants(
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List tenants and their namespaces."""
    with server.connect() as client:
        tenants = client.list_tenants(timeout=server.timeout)
    if json_out:
        output.print_json([tenant_json(t) for t in tenants])
        return
    table = Table()
    table.add_column("tenant", no_wrap=True)
    table.add_column("namespaces")
    for t in tenants:
        table.add_row(t.name, ", ".join(t.namespaces) or "-")
    output.stdout.print(table)


@tenant_app.command("describe")
@server_options
def describe_tenant(
    tenant: TenantName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Show a tenant and its namespaces."""
    with server.connect() as client:
        info = client.describe_tenant(tenant, timeout=server.timeout)
    if json_out:
        output.print_json(tenant_json(info))
    else:
        output.stdout.print(
            f"tenant {info.name}, created {output.human_time_ms(info.created_at_ms)}"
        )
        output.stdout.print(f"namespaces: {', '.join(info.namespaces) or '-'}")


@tenant_app.command("delete")
@server_options
def delete_tenant(
    tenant: TenantName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Delete a tenant; one that still has namespaces is refused."""
    with server.connect() as client:
        client.delete_tenant(tenant, timeout=server.timeout)
    if json_out:
        output.print_json({"deleted": tenant})
    else:
        output.stdout.print(f"deleted tenant {tenant}")


# ---------------------------------------------------------------------------- namespaces


@namespace_app.command("create")
@server_options
def create_namespace(
    namespace: NamespaceName,
    policy: PolicyOption = None,
    if_not_exists: IfNotExists = False,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Create a namespace in an existing tenant, with policies its topics inherit."""
    policies = parse_policies(policy)
    created = True
    with server.connect() as client:
        try:
            info = client.create_namespace(namespace, policies, timeout=server.timeout)
        except AlreadyExistsError:
            if not if_not_exists:
                raise
            info, created = client.describe_namespace(namespace, timeout=server.timeout), False
            diffs = [
                f"{k}={_shown(k, info.policies[k]) if k in info.policies else 'unset'}, "
                f"not {_shown(k, v)}"
                for k, v in policies.items()
                if k not in info.policies or info.policies[k] != v
            ]
            if diffs:
                raise CliError(
                    f"namespace {info.name} already exists with {'; '.join(diffs)}"
                ) from None
    if json_out:
        output.print_json(namespace_json(info))
    else:
        output.stdout.print(
            f"created namespace {info.name}" if created else f"namespace {info.name} already exists"
        )


@namespace_app.command("list")
@server_options
def list_namespaces(
    tenant: Annotated[str, typer.Argument(help="Only this tenant's namespaces.")] = "",
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """List namespaces with their topic count and the policies set on them."""
    with server.connect() as client:
        found = client.list_namespaces(tenant, timeout=server.timeout)
    if json_out:
        output.print_json([namespace_json(ns) for ns in found])
        return
    table = Table()
    table.add_column("namespace", no_wrap=True)
    table.add_column("topics", justify="right")
    table.add_column("policies set")
    for ns in found:
        set_here = ", ".join(f"{k}={_shown(k, v)}" for k, v in sorted(ns.policies.items()))
        table.add_row(ns.name, str(len(ns.topics)), set_here or "-")
    output.stdout.print(table)


@namespace_app.command("describe")
@server_options
def describe_namespace(
    namespace: NamespaceName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Show a namespace's topics and every policy (set here, or the server's)."""
    with server.connect() as client:
        info = client.describe_namespace(namespace, timeout=server.timeout)
    if json_out:
        output.print_json(namespace_json(info))
    else:
        show_namespace(info)


@namespace_app.command("delete")
@server_options
def delete_namespace(
    namespace: NamespaceName,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Delete a namespace; one that still holds topics is refused."""
    with server.connect() as client:
        client.delete_namespace(namespace, timeout=server.timeout)
    if json_out:
        output.print_json({"deleted": namespace})
    else:
        output.stdout.print(f"deleted namespace {namespace}")


def _set(
    namespace: str,
    policies: dict[str, Any],
    remove: list[str],
    server: ServerOptions,
    json_out: bool,
) -> None:
    with server.connect() as client:
        info = client.set_namespace_policies(
            namespace, policies, remove=remove, timeout=server.timeout
        )
    if json_out:
        output.print_json(namespace_json(info))
    else:
        show_policies(info)


@namespace_app.command("set-retention")
@server_options
def set_retention(
    namespace: NamespaceName,
    time: Annotated[
        str | None,
        typer.Option("--time", help='Keep messages this long: "7d", "12h", or "none" (forever).'),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option("--size", help='Keep at most this much per partition: "10GiB" or "none".'),
    ] = None,
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Set the retention its topics inherit (by time, by size per partition, or both)."""
    policies: dict[str, Any] = {}
    if time is not None:
        policies["retention_ms"] = policy_value("retention_ms", time, "--time")
    if size is not None:
        policies["retention_bytes"] = policy_value("retention_bytes", size, "--size")
    if not policies:
        raise typer.BadParameter("nothing to change: give --time, --size or both")
    _set(namespace, policies, [], server, json_out)


@namespace_app.command("set-deduplication")
@server_options
def set_deduplication(
    namespace: NamespaceName,
    state: Annotated[str, typer.Argument(help="on or off.")],
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Turn producer deduplication on or off for its topics (off: resends are stored again)."""
    value = policy_value("deduplication", state, "STATE")
    _set(namespace, {"deduplication": value}, [], server, json_out)


@namespace_app.command("set-policy")
@server_options
def set_policy(
    namespace: NamespaceName,
    policies: Annotated[
        list[str], typer.Argument(help="KEY=VALUE pairs, such as message_ttl_ms=1h.")
    ],
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Set any policies (see --help of 'namespace create' for the keys)."""
    _set(
        namespace,
        parse_policies(policies, "POLICIES"),
        [],
        server,
        json_out,
    )


@namespace_app.command("remove-policy")
@server_options
def remove_policy(
    namespace: NamespaceName,
    keys: Annotated[list[str], typer.Argument(help="Policies to unset (the server's apply).")],
    server: ServerOptions = SERVER_DEFAULTS,
    json_out: Json = False,
) -> None:
    """Unset policies of a namespace: its topics then follow the server's settings."""
    _set(namespace, {}, keys, server, json_out)
