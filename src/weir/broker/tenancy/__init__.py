"""Tenants, namespaces and the policies topics inherit from them (see ``registry``)."""

from weir.broker.tenancy.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    TopicName,
    parse_namespace,
    parse_topic,
    short_name,
)
from weir.broker.tenancy.policies import KEYS as POLICY_KEYS
from weir.broker.tenancy.policies import Policies, effective
from weir.broker.tenancy.registry import NAMESPACES, Namespace, Tenancy, Tenant

__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "NAMESPACES",
    "POLICY_KEYS",
    "Namespace",
    "Policies",
    "Tenancy",
    "Tenant",
    "TopicName",
    "effective",
    "parse_namespace",
    "parse_topic",
    "short_name",
]
