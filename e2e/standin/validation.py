"""Validation of built-in kinds, the part of the API server's that operators trip over: object
names, label keys and values (63 characters), and pod templates (non-empty `containers`, each
with a DNS-label name and an image). Returns (field path, message) pairs like admission.py."""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")

# Kinds whose names must be DNS-1035 labels (Services) or DNS-1123 labels (Namespaces).
NAME_RULES = {("", "services"): (DNS1035_LABEL, 63, "a DNS-1035 label"),
              ("", "namespaces"): (DNS1123_LABEL, 63, "a lowercase RFC 1123 label")}


def validate_name(group: str, plural: str, name: str) -> list:
    pattern, limit, what = NAME_RULES.get((group, plural), (DNS1123_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain"))
    if plural == "events" or group in ("rbac.authorization.k8s.io",):
        return []  # event and RBAC names allow more characters
    errors = []
    if len(name) > limit:
        errors.append(("metadata.name", f'Invalid value: "{name}": must be no more than {limit} characters'))
    if not pattern.match(name):
        errors.append(("metadata.name", f'Invalid value: "{name}": a valid name must be {what}'))
    return errors


def validate_labels(labels: dict | None, path: str = "metadata.labels") -> list:
    errors = []
    for key, value in (labels or {}).items():
        prefix, _, name = key.rpartition("/")
        if len(name) > 63 or not LABEL_NAME.match(name) or (prefix and not DNS1123_SUBDOMAIN.match(prefix)):
            errors.append((path, f'Invalid value: "{key}": name part must consist of alphanumeric characters, '
                                 "'-', '_' or '.', and must start and end with an alphanumeric character"))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            errors.append((path, f'Invalid value: "{value}": must be no more than 63 characters' if
                           isinstance(value, str) and len(value) > 63 else
                           f'Invalid value: "{value}": a valid label must be an empty string or consist of '
                           "alphanumeric characters, '-', '_' or '.'"))
    return errors


def validate_pod_spec(spec: dict | None, path: str) -> list:
    spec = spec or {}
    containers = spec.get("containers")
    if not containers:
        return [(f"{path}.containers", "Required value")]
    errors, seen = [], set()
    for i, c in enumerate(containers):
        cpath = f"{path}.containers[{i}]"
        name = c.get("name") or ""
        if not name:
            errors.append((f"{cpath}.name", "Required value"))
        elif len(name) > 63 or not DNS1123_LABEL.match(name):
            errors.append((f"{cpath}.name", f'Invalid value: "{name}": a lowercase RFC 1123 label must consist of '
                                            "lower case alphanumeric characters or '-'"))
        elif name in seen:
            errors.append((f"{cpath}.name", f'Duplicate value: "{name}"'))
        seen.add(name)
        if not c.get("image"):
            errors.append((f"{cpath}.image", "Required value"))
    return errors


def validate_builtin(group: str, plural: str, obj: dict) -> list:
    """Errors of a built-in object (empty when valid)."""
    meta = obj.get("metadata") or {}
    errors = validate_name(group, plural, meta.get("name", "")) + validate_labels(meta.get("labels"))
    if (group, plural) == ("", "pods"):
        errors += validate_pod_spec(obj.get("spec"), "spec")
    if (group, plural) in (("apps", "deployments"), ("apps", "statefulsets"), ("apps", "replicasets")):
        template = (obj.get("spec") or {}).get("template") or {}
        errors += validate_labels((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
        errors += validate_pod_spec(template.get("spec"), "spec.template.spec")
    return errors
