"""RBAC as the API server's authorizer does it, over the Roles, ClusterRoles and bindings in
the store, plus the request log and its comparison with the rules.

Users: `system:masters` members (the kubectl admin of the harness) may do anything; a
ServiceAccount `system:serviceaccount:NS:NAME` gets what its bindings grant. Discovery
(`/api`, `/apis`, `/version`, `/openapi`) is open to every authenticated user, as the default
`system:discovery` ClusterRole makes it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass


@dataclass
class Attributes:
    user: str
    groups: list
    verb: str
    group: str
    resource: str  # plural, with "/subresource" when one is addressed
    namespace: str
    name: str


def forbidden_message(a: Attributes) -> str:
    """The message of the API server's 403 for `a`."""
    base, _, sub = a.resource.partition("/")
    target = f"{base}.{a.group}" if a.group else base
    subject = f'{target} "{a.name}"' if a.name else target
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    return (f'{subject} is forbidden: User "{a.user}" cannot {a.verb} resource "{a.resource}" '
            f'in API group "{a.group}" {where}')


def rule_allows(rule: dict, a: Attributes) -> bool:
    def has(values, item):
        return "*" in (values or []) or item in (values or [])

    if not has(rule.get("verbs"), a.verb) or not has(rule.get("apiGroups"), a.group):
        return False
    resources = rule.get("resources") or []
    base = a.resource.split("/")[0]
    if not ("*" in resources or a.resource in resources or f"{base}/*" in resources
            or ("/" not in a.resource and f"*/{a.resource}" in resources)):
        return False
    names = rule.get("resourceNames")
    return not names or a.name in names


def subject_matches(subject: dict, a: Attributes) -> bool:
    kind = subject.get("kind")
    if kind == "ServiceAccount":
        return a.user == f"system:serviceaccount:{subject.get('namespace')}:{subject.get('name')}"
    if kind == "User":
        return a.user == subject.get("name")
    if kind == "Group":
        return subject.get("name") in a.groups
    return False


def authorize(a: Attributes, roles: dict, cluster_roles: dict, role_bindings: list,
              cluster_role_bindings: list) -> bool:
    """True when a binding grants `a`. `roles` maps (namespace, name) to rules,
    `cluster_roles` name to rules."""
    if "system:masters" in a.groups:
        return True
    for b in cluster_role_bindings:
        if any(subject_matches(s, a) for s in b.get("subjects") or []):
            if any(rule_allows(r, a) for r in cluster_roles.get(b["roleRef"]["name"], [])):
                return True
    if a.namespace:
        for b in role_bindings:
            if b["metadata"].get("namespace") != a.namespace:
                continue
            if not any(subject_matches(s, a) for s in b.get("subjects") or []):
                continue
            ref = b["roleRef"]
            rules = cluster_roles.get(ref["name"], []) if ref["kind"] == "ClusterRole" else \
                roles.get((a.namespace, ref["name"]), [])
            if any(rule_allows(r, a) for r in rules):
                return True
    return False


class RequestLog:
    """Every resource request (user, verb, group, resource, namespace, name, code) as JSON lines."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.lock = threading.Lock()

    def record(self, a: Attributes, code: int) -> None:
        if not self.path:
            return
        line = json.dumps({"user": a.user, "verb": a.verb, "group": a.group, "resource": a.resource,
                           "namespace": a.namespace, "name": a.name, "code": code})
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
