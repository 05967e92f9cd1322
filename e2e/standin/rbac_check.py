"""Compares the API requests a ServiceAccount made (the stand-in's request log) with the RBAC
rules a rendered chart grants it.

    python3 e2e/standin/rbac_check.py --log requests.jsonl --manifests rendered.yaml \
        --user system:serviceaccount:weir-system:weir-operator \
        [--fail-unused --allow-unused e2e/standin/rbac_allowlist.yaml]

Fails (exit 1) when a request was refused (403) or is not covered by the rendered rules
(missing rules). Reports granted (group, resource, verb) triples no request used (unused rules);
with --fail-unused (a run of every scenario) an unused grant fails too, unless the allow-list
names it with the path that needs it. Allow-listed grants that were used are reported.
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


def load_allowlist(path: str) -> set:
    """(group, resource, verb) triples of the allow-list file; every entry must say why."""
    with open(path, encoding="utf-8") as f:
        entries = yaml.safe_load(f) or []
    out = set()
    for i, e in enumerate(entries):
        missing = {"group", "resource", "verb", "why"} - set(e)
        if missing or set(e) - {"group", "resource", "verb", "why"} or not str(e.get("why", "")).strip():
            raise ValueError(f"{path}: entry {i + 1} needs exactly group, resource, verb and a non-empty why: {e}")
        out.add((e["group"], e["resource"], e["verb"]))
    return out


def split_unused(unused: list, allowlist: set) -> tuple:
    """(unexpected, allowed): unused grants not on the allow-list, and those on it."""
    unexpected = [u for u in unused if (u[1], u[2], u[3]) not in allowlist]
    allowed = [u for u in unused if (u[1], u[2], u[3]) in allowlist]
    return unexpected, allowed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True)
    p.add_argument("--manifests", required=True)
    p.add_argument("--user", required=True)
    p.add_argument("--fail-unused", action="store_true",
                   help="fail when a granted verb was never used and is not on the allow-list")
    p.add_argument("--allow-unused", help="YAML allow-list of grants no scenario uses (with why)")
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
    allowlist = load_allowlist(a.allow_unused) if a.allow_unused else set()
    unexpected, allowed = split_unused(unused, allowlist)
    for ns, g, res, v in allowed:
        print(f"  unused   {g or 'core':<22} {res:<24} {v}  (allow-listed)")
    for ns, g, res, v in unexpected:
        print(f"  UNUSED   {g or 'core':<22} {res:<24} {v}  (granted{' in ' + ns if ns else ' cluster-wide'})")
    used_allowed = sorted(allowlist - {(g, res, v) for _, g, res, v in unused})
    for g, res, v in used_allowed:
        print(f"  note     {g or 'core':<22} {res:<24} {v}  allow-listed but used or not granted: remove it from the list")
    for verb, group, res, ns, code in missing:
        print(f"  MISSING  {group or 'core':<22} {res:<24} {verb}  (namespace '{ns}', answered {code})")
    rc = 0
    if missing:
        print(f"rbac-check: FAIL: {len(missing)} request kinds are not granted by the chart's RBAC")
        rc = 1
    else:
        print("rbac-check: every request was granted by the chart's RBAC")
    if a.fail_unused and unexpected:
        print(f"rbac-check: FAIL: {len(unexpected)} granted verbs were never used and are not allow-listed "
              f"({a.allow_unused or 'no allow-list'}): trim the chart's rules or allow-list them with a reason")
        rc = 1
    elif a.fail_unused:
        print("rbac-check: every granted verb was used or is allow-listed")
    return rc


if __name__ == "__main__":
    sys.exit(main())
