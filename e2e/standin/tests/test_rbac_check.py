"""rbac_check: requests not granted by the chart's rules fail; granted rules never used are listed."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rbac_check import check  # noqa: E402

USER = "system:serviceaccount:weir-system:weir-operator"
MANIFESTS = [
    {"kind": "Role", "metadata": {"name": "op", "namespace": "jobs"},
     "rules": [{"apiGroups": ["weir.dev"], "resources": ["streamjobs"], "verbs": ["get", "list", "watch"]}]},
    {"kind": "RoleBinding", "metadata": {"name": "op", "namespace": "jobs"},
     "roleRef": {"kind": "Role", "name": "op"},
     "subjects": [{"kind": "ServiceAccount", "name": "weir-operator", "namespace": "weir-system"}]},
]


def request(verb, group, resource, namespace, code=200, user=USER):
    return {"user": user, "verb": verb, "group": group, "resource": resource, "namespace": namespace,
            "name": "", "code": code}


def test_a_request_outside_the_rules_is_missing_and_unused_rules_are_reported():
    requests = [request("list", "weir.dev", "streamjobs", "jobs"),
                request("get", "coordination.k8s.io", "leases", "weir-system", 403),
                request("get", "weir.dev", "streamjobs", "other"),
                request("delete", "", "pods", "jobs", user="kubernetes-admin")]
    missing, unused = check(requests, MANIFESTS, USER)
    assert missing == [("get", "coordination.k8s.io", "leases", "weir-system", 403),
                       ("get", "weir.dev", "streamjobs", "other", 200)]
    assert unused == [("jobs", "weir.dev", "streamjobs", "get"), ("jobs", "weir.dev", "streamjobs", "watch")]


def test_requests_inside_the_rules_pass():
    missing, unused = check([request(v, "weir.dev", "streamjobs", "jobs") for v in ("get", "list", "watch")],
                            MANIFESTS, USER)
    assert missing == [] and unused == []


def test_unused_grants_fail_unless_allow_listed_with_a_reason(tmp_path):
    from rbac_check import load_allowlist, split_unused
    missing, unused = check([request("list", "weir.dev", "streamjobs", "jobs")], MANIFESTS, USER)
    assert missing == []
    allow = tmp_path / "allow.yaml"
    allow.write_text("- {group: weir.dev, resource: streamjobs, verb: watch, why: the controller's watch}\n")
    unexpected, allowed = split_unused(unused, load_allowlist(str(allow)))
    assert unexpected == [("jobs", "weir.dev", "streamjobs", "get")]
    assert allowed == [("jobs", "weir.dev", "streamjobs", "watch")]
    allow.write_text("- {group: weir.dev, resource: streamjobs, verb: watch}\n")
    try:
        load_allowlist(str(allow))
        raise AssertionError("an entry without a reason was accepted")
    except ValueError as e:
        assert "why" in str(e)


def test_the_shipped_allow_list_loads_and_every_entry_says_why():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rbac_allowlist.yaml")
    entries = load_allowlist_entries(path)
    assert entries and all(len(e["why"]) > 40 for e in entries)


def load_allowlist_entries(path):
    import yaml
    from rbac_check import load_allowlist
    load_allowlist(path)
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)
