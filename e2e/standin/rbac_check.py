"""Compares the API requests a ServiceAccount made (the stand-in's request log) with the RBAC
rules a rendered chart grants it.

    python3 e2e/standin/rbac_check.py --log requests.jsonl --manifests rendered.yaml \
        --user system:serviceaccount:weir-system:weir-operator

Fails (exit 1) when a request was refused (403) or is not covered by the rendered rules
(missing rules); reports granted (group, resource, verb) triples no request used (unused rules).
"""

from __future__ import annotations

import argparse
import json
import sys

import yaml


def granted_rules(manifests: list, user: str) -> list:
    """(namespace or '' for cluster-wide, rule) pairs bound to `user` in the manifests."""
    roles, cluster_roles, out = {}, {}, []
    for doc in manifests:
        kind = doc.get("kind")
        if kind == "Role":
            roles[(doc["metadata"].get("namespace", ""), doc["metadata"]["name"])] = doc.get("rules") or []
        elif kind == "ClusterRole":
            cluster_roles[doc["metadata"]["name"]] = doc.get("rules") or []
    for doc in manifests:
        kind = doc.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and
                   user == f"system:serviceaccount:{s.get('namespace')}:{s.get('name')}"
                   for s in doc.get("subjects") or []):
            continue
        ref = doc["roleRef"]
        ns = doc["metadata"].get("namespace", "") if kind == "RoleBinding" else ""
        rules = cluster_roles.get(ref["name"], []) if ref["kind"] == "ClusterRole" else roles.get((ns, ref["name"]), [])
        out += [(ns, r) for r in rules]
    return out


def expand(rules: list) -> set:
    """Every (namespace, group, resource, verb) a list of (namespace, rule) grants (no wildcards)."""
    out = set()
    for ns, r in rules:
        for g in r.get("apiGroups") or []:
            for res in r.get("resources") or []:
                for v in r.get("verbs") or []:
                    out.add((ns, g, res, v))
    return out


def covered(grants: set, request: dict) -> bool:
    for ns, g, res, v in grants:
        if ns and ns != request["namespace"]:
            continue
        if g not in ("*", request["group"]) or v not in ("*", request["verb"]):
            continue
        if res in ("*", request["resource"]):
            return True
    return False


def check(requests: list, manifests: list, user: str) -> tuple:
    """(missing, unused): requests not granted, grants never used."""
    grants = expand(granted_rules(manifests, user))
    mine = [r for r in requests if r["user"] == user]
    missing = sorted({(r["verb"], r["group"], r["resource"], r["namespace"], r["code"]) for r in mine
                      if r["code"] == 403 or not covered(grants, r)})
    used = set()
    for ns, g, res, v in grants:
        if any((not ns or ns == r["namespace"]) and g in ("*", r["group"]) and res in ("*", r["resource"])
               and v in ("*", r["verb"]) for r in mine):
            used.add((ns, g, res, v))
    unused = sorted(grants - used)
    return missing, unused


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True)
    p.add_argument("--manifests", required=True)
    p.add_argument("--user", required=True)
    a = p.parse_args()
    with open(a.log, encoding="utf-8") as f:
        requests = [json.loads(line) for line in f if line.strip()]
    with open(a.manifests, encoding="utf-8") as f:
        manifests = [d for d in yaml.safe_load_all(f) if d]
    missing, unused = check(requests, manifests, a.user)
    mine = [r for r in requests if r["user"] == a.user]
    print(f"rbac-check: {len(mine)} requests by {a.user}")
    seen = sorted({(r["verb"], r["group"] or "core", r["resource"]) for r in mine})
    for verb, group, res in seen:
        print(f"  used     {group:<22} {res:<24} {verb}")
    for ns, g, res, v in unused:
        print(f"  unused   {g or 'core':<22} {res:<24} {v}  (granted{' in ' + ns if ns else ' cluster-wide'})")
    for verb, group, res, ns, code in missing:
        print(f"  MISSING  {group or 'core':<22} {res:<24} {verb}  (namespace '{ns}', answered {code})")
    if missing:
        print(f"rbac-check: FAIL: {len(missing)} request kinds are not granted by the chart's RBAC")
        return 1
    print("rbac-check: every request was granted by the chart's RBAC")
    return 0


if __name__ == "__main__":
    sys.exit(main())
