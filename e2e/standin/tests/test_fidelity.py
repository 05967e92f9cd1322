"""The stand-in refuses what the API server refuses: each test drives the HTTP API as a client
would and asserts the API server's answer (codes, messages, resourceVersion/generation)."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import CM, SJ, stream_job  # noqa: E402

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def config_map(name: str = "c", **data) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_every_write_bumps_the_resource_version_and_a_stale_update_is_409(cluster):
    code, created = cluster.admin.request("POST", CM, config_map(a="1"))
    assert code == 201
    rv1 = created["metadata"]["resourceVersion"]
    created["data"]["a"] = "2"
    code, updated = cluster.admin.request("PUT", f"{CM}/c", created)
    assert code == 200
    assert int(updated["metadata"]["resourceVersion"]) > int(rv1)
    created["data"]["a"] = "3"  # still carries rv1: stale
    code, status = cluster.admin.request("PUT", f"{CM}/c", created)
    assert code == 409
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]
    code, _ = cluster.admin.request("PATCH", f"{CM}/c", {"metadata": {"resourceVersion": rv1}, "data": {"a": "4"}},
                                    MERGE)
    assert code == 409, "a merge patch carrying a stale resourceVersion is a precondition failure"
    code, status = cluster.admin.request("DELETE", f"{CM}/c", {"preconditions": {"resourceVersion": rv1}})
    assert code == 409 and "Precondition failed" in status["message"]
    assert cluster.admin.request("GET", f"{CM}/c")[1]["data"]["a"] == "2"


def test_generation_is_bumped_by_spec_changes_only(cluster):
    code, sj = cluster.admin.request("POST", SJ, stream_job())
    assert code == 201, sj
    assert sj["metadata"]["generation"] == 1
    code, sj = cluster.admin.request("PATCH", f"{SJ}/wc", {"metadata": {"labels": {"team": "a"}}}, MERGE)
    assert code == 200 and sj["metadata"]["generation"] == 1
    code, sj = cluster.admin.request("PATCH", f"{SJ}/wc/status", {"status": {"lifecycleState": "Running"}}, MERGE)
    assert code == 200 and sj["metadata"]["generation"] == 1
    assert sj["status"]["lifecycleState"] == "Running"
    code, sj = cluster.admin.request("PATCH", f"{SJ}/wc", {"spec": {"parallelism": 3}}, MERGE)
    assert code == 200 and sj["metadata"]["generation"] == 2


def test_status_subresource_separates_status_from_spec(cluster):
    cluster.admin.request("POST", SJ, stream_job())
    code, sj = cluster.admin.request("PATCH", f"{SJ}/wc", {"status": {"lifecycleState": "Failed"}}, MERGE)
    assert code == 200 and "status" not in sj, "status written through the main resource is ignored"
    code, sj = cluster.admin.request("PATCH", f"{SJ}/wc/status",
                                     {"spec": {"parallelism": 5}, "status": {"lifecycleState": "Running"}}, MERGE)
    assert code == 200 and sj["spec"]["parallelism"] == 2, "spec written through /status is ignored"


def test_a_watch_from_a_compacted_resource_version_is_410_gone_and_a_relist_works(cluster):
    code, first = cluster.admin.request("POST", CM, config_map("old"))
    old_rv = first["metadata"]["resourceVersion"]
    for i in range(60):  # the fixture keeps 50 watch events
        cluster.admin.request("POST", CM, config_map(f"c{i}"))
    resp = cluster.admin.stream(f"{CM}?watch=true&resourceVersion={old_rv}")
    assert resp.status == 200, "the API server answers a too-old watch in the stream, not with HTTP 410"
    event = json.loads(resp.readline())
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert event["object"]["reason"] == "Expired" and "too old resource version" in event["object"]["message"]
    assert resp.readline() == b"", "the stream ends after the ERROR event"
    resp.close()
    code, listing = cluster.admin.request("GET", CM)
    assert code == 200 and len(listing["items"]) == 61
    rv = listing["metadata"]["resourceVersion"]
    resp = cluster.admin.stream(f"{CM}?watch=true&resourceVersion={rv}&timeoutSeconds=5")
    cluster.admin.request("POST", CM, config_map("after"))
    event = json.loads(resp.readline())
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "after"
    resp.close()


def test_watch_sends_bookmarks_when_asked(cluster, monkeypatch):
    import apiserver
    monkeypatch.setattr(apiserver, "BOOKMARK_SECONDS", 0.2)
    _, listing = cluster.admin.request("GET", CM)
    rv = listing["metadata"]["resourceVersion"]
    resp = cluster.admin.stream(f"{CM}?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3")
    event = json.loads(resp.readline())
    assert event["type"] == "BOOKMARK" and int(event["object"]["metadata"]["resourceVersion"]) >= int(rv)
    resp.close()


def test_rbac_refuses_what_the_roles_do_not_grant_with_the_api_servers_message(cluster):
    token = cluster.server.tokens.service_account("weir-system", "weir-operator")
    operator = cluster.client_for(token)
    code, status = operator.request("GET", "/apis/coordination.k8s.io/v1/namespaces/weir-system/leases/lead")
    assert code == 403
    assert status["message"] == ('leases.coordination.k8s.io "lead" is forbidden: User '
                                 '"system:serviceaccount:weir-system:weir-operator" cannot get resource "leases" '
                                 'in API group "coordination.k8s.io" in the namespace "weir-system"')
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "r", "namespace": "weir-system"},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "r", "namespace": "weir-system"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
               "subjects": [{"kind": "ServiceAccount", "name": "weir-operator", "namespace": "weir-system"}]}
    assert cluster.admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/weir-system/roles", role)[0] == 201
    assert cluster.admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/weir-system/rolebindings",
                                 binding)[0] == 201
    code, _ = operator.request("GET", "/apis/coordination.k8s.io/v1/namespaces/weir-system/leases/lead")
    assert code == 404, "granted now: the lease simply does not exist"
    code, status = operator.request("POST", "/apis/coordination.k8s.io/v1/namespaces/weir-system/leases",
                                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                     "metadata": {"name": "lead"}})
    assert code == 403 and 'cannot create resource "leases"' in status["message"]
    code, status = operator.request("GET", "/apis/coordination.k8s.io/v1/namespaces/weir-e2e/leases/lead")
    assert code == 403, "a Role grants only in its own namespace"


def test_crd_schema_rejects_wrong_types_enums_and_cel_rules_and_prunes_unknown_fields(cluster):
    code, status = cluster.admin.request("POST", SJ, stream_job(parallelism="two"))
    assert code == 422 and "spec.parallelism" in status["message"] and "must be of type integer" in status["message"]
    code, status = cluster.admin.request("POST", SJ, stream_job(upgradeMode="sometimes"))
    assert code == 422 and 'Unsupported value: "sometimes"' in status["message"]
    code, status = cluster.admin.request("POST", SJ, stream_job(parallelism=0))
    assert code == 422 and "spec.parallelism must be at least 1" in status["message"]
    code, status = cluster.admin.request("POST", SJ, stream_job(parallelism=200))
    assert code == 422 and "spec.parallelism must not exceed spec.maxParallelism" in status["message"]
    missing = stream_job()
    del missing["spec"]["job"]
    code, status = cluster.admin.request("POST", SJ, missing)
    assert code == 422 and "spec.job: Required value" in status["message"]
    code, sj = cluster.admin.request("POST", SJ, stream_job(colour="blue"))
    assert code == 201 and "colour" not in sj["spec"], "unknown fields are pruned"
    assert sj["spec"]["checkpointing"]["interval"] == "10s", "schema defaults are applied"
    code, status = cluster.admin.request("POST", f"{SJ}?fieldValidation=Strict", stream_job("strict", colour="blue"))
    assert code == 400 and 'unknown field "spec.colour"' in status["message"]
    code, status = cluster.admin.request("PATCH", f"{SJ}/wc", {"spec": {"maxParallelism": 256}}, MERGE)
    assert code == 422 and "spec.maxParallelism is immutable" in status["message"], "transition rule (oldSelf)"


def test_server_side_apply_conflicts_unless_forced(cluster):
    body = config_map("ssa", a="1")
    code, _ = cluster.admin.request("PATCH", f"{CM}/ssa?fieldManager=one", body, APPLY)
    assert code == 201 or code == 200
    code, status = cluster.admin.request("PATCH", f"{CM}/ssa?fieldManager=two", config_map("ssa", a="2"), APPLY)
    assert code == 409
    assert 'conflict with "one"' in status["message"] and ".data.a" in status["message"]
    code, same = cluster.admin.request("PATCH", f"{CM}/ssa?fieldManager=two", config_map("ssa", a="1"), APPLY)
    assert code == 200, "applying the same value is shared ownership, not a conflict"
    code, forced = cluster.admin.request("PATCH", f"{CM}/ssa?fieldManager=two&force=true", config_map("ssa", a="2"),
                                         APPLY)
    assert code == 200 and forced["data"]["a"] == "2"
    code, mine = cluster.admin.request("PATCH", f"{CM}/ssa?fieldManager=one", config_map("ssa", b="x"), APPLY)
    assert code == 200 and mine["data"] == {"a": "2", "b": "x"}, "a field one no longer owns is kept"
    code, status = cluster.admin.request("PATCH", f"{CM}/ssa", config_map("ssa", a="3"), APPLY)
    assert code == 400 and "fieldManager" in status["message"]


def test_finalizers_hold_deletion_and_owner_references_are_garbage_collected(cluster):
    code, owner = cluster.admin.request("POST", SJ, dict(stream_job(), metadata={
        "name": "wc", "namespace": "weir-e2e", "finalizers": ["weir.dev/cleanup"]}))
    assert code == 201
    child = config_map("child")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "weir.dev/v1alpha1", "kind": "StreamJob", "name": "wc",
                                             "uid": owner["metadata"]["uid"], "controller": True}]
    assert cluster.admin.request("POST", CM, child)[0] == 201
    code, deleting = cluster.admin.request("DELETE", f"{SJ}/wc")
    assert code == 200 and deleting["metadata"]["deletionTimestamp"]
    assert deleting["metadata"]["generation"] == owner["metadata"]["generation"] + 1, \
        "the first graceful deletion bumps generation (a generation-filtered controller sees it)"
    code, again = cluster.admin.request("DELETE", f"{SJ}/wc")
    assert code == 200 and again["metadata"]["generation"] == deleting["metadata"]["generation"]
    code, status = cluster.admin.request("PATCH", f"{SJ}/wc", {"metadata": {"finalizers": ["a", "weir.dev/cleanup"]}},
                                         MERGE)
    assert code == 422 and "no new finalizers can be added" in status["message"]
    cluster.store.collect_garbage()
    assert cluster.admin.request("GET", f"{CM}/child")[0] == 200, "the owner still exists (finalizer)"
    code, _ = cluster.admin.request("PATCH", f"{SJ}/wc", {"metadata": {"finalizers": None}}, MERGE)
    assert code == 200
    assert cluster.admin.request("GET", f"{SJ}/wc")[0] == 404
    cluster.store.collect_garbage()
    assert cluster.admin.request("GET", f"{CM}/child")[0] == 404, "dependents of a deleted owner are collected"


def test_foreground_deletion_waits_for_dependents(cluster):
    code, owner = cluster.admin.request("POST", CM, config_map("owner"))
    child = config_map("dep")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                             "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}]
    child["metadata"]["finalizers"] = ["test/hold"]
    cluster.admin.request("POST", CM, child)
    code, deleting = cluster.admin.request("DELETE", f"{CM}/owner", {"propagationPolicy": "Foreground"})
    assert "foregroundDeletion" in deleting["metadata"]["finalizers"]
    cluster.store.collect_garbage()
    assert cluster.admin.request("GET", f"{CM}/owner")[0] == 200, "owner waits for its dependent"
    cluster.admin.request("PATCH", f"{CM}/dep", {"metadata": {"finalizers": None}}, MERGE)
    cluster.store.collect_garbage()
    assert cluster.admin.request("GET", f"{CM}/owner")[0] == 404


def test_scale_subresource_sets_the_spec_replicas_path(cluster):
    cluster.admin.request("POST", SJ, stream_job())
    code, scale = cluster.admin.request("GET", f"{SJ}/wc/scale")
    assert code == 200 and scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    code, scale = cluster.admin.request("PATCH", f"{SJ}/wc/scale", {"spec": {"replicas": 4}}, MERGE)
    assert code == 200 and scale["spec"]["replicas"] == 4
    _, sj = cluster.admin.request("GET", f"{SJ}/wc")
    assert sj["spec"]["parallelism"] == 4 and sj["metadata"]["generation"] == 2


def test_core_events_view_includes_events_k8s_io_events_with_field_selectors(cluster):
    event = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
             "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "weir-operator",
             "reportingInstance": "x", "action": "Deploy", "reason": "Deployed", "note": "deployed", "type": "Normal",
             "regarding": {"kind": "StreamJob", "name": "wc", "namespace": "weir-e2e"}}
    assert cluster.admin.request("POST", "/apis/events.k8s.io/v1/namespaces/weir-e2e/events", event)[0] == 201
    code, listing = cluster.admin.request(
        "GET", "/api/v1/namespaces/weir-e2e/events?fieldSelector=involvedObject.kind%3DStreamJob,type%3DNormal")
    assert code == 200 and [e["message"] for e in listing["items"]] == ["deployed"]
    code, listing = cluster.admin.request(
        "GET", "/api/v1/namespaces/weir-e2e/events?fieldSelector=involvedObject.name%3Dother")
    assert listing["items"] == []


def test_compaction_keeps_a_caught_up_watch_but_refuses_resuming_from_before_it(cluster):
    _, listing = cluster.admin.request("GET", CM)
    rv = listing["metadata"]["resourceVersion"]
    resp = cluster.admin.stream(f"{CM}?watch=true&resourceVersion={rv}&timeoutSeconds=5")
    cluster.admin.request("POST", "/api/v1/namespaces/weir-e2e/secrets",
                          {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other-kind"}})
    import time
    time.sleep(1.5)  # the watch loop has seen the head
    cluster.store.compact()
    cluster.admin.request("POST", CM, config_map("after-compaction"))
    event = json.loads(resp.readline())
    assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "after-compaction"
    resp.close()
    resp = cluster.admin.stream(f"{CM}?watch=true&resourceVersion={rv}")
    event = json.loads(resp.readline())
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    resp.close()


def test_built_in_validation_refuses_empty_containers_and_long_label_values(cluster):
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {"matchLabels": {"a": "b"}},
                           "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}
    code, status = cluster.admin.request("POST", "/apis/apps/v1/namespaces/weir-e2e/deployments", deployment)
    assert code == 422
    assert status["message"] == 'Deployment.apps "d" is invalid: spec.template.spec.containers: Required value'
    code, status = cluster.admin.request("POST", CM, dict(config_map("long"), metadata={
        "name": "long", "labels": {"weir.dev/job": "j" * 64}}))
    assert code == 422 and "must be no more than 63 characters" in status["message"]
    code, status = cluster.admin.request("POST", "/api/v1/namespaces/weir-e2e/services", {
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "s" * 64}, "spec": {"ports": [{"port": 1}]}})
    assert code == 422 and "metadata.name" in status["message"]


def test_an_apply_that_creates_needs_the_create_verb_too(cluster):
    token = cluster.server.tokens.service_account("weir-system", "weir-operator")
    operator = cluster.client_for(token)
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "patch-only", "namespace": "weir-e2e"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "patch-only", "namespace": "weir-e2e"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "patch-only"},
               "subjects": [{"kind": "ServiceAccount", "name": "weir-operator", "namespace": "weir-system"}]}
    cluster.admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/weir-e2e/roles", role)
    cluster.admin.request("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/weir-e2e/rolebindings", binding)
    code, status = operator.request("PATCH", f"{CM}/new?fieldManager=op", config_map("new", a="1"), APPLY)
    assert code == 403 and 'cannot create resource "configmaps"' in status["message"]
    cluster.admin.request("POST", CM, config_map("new", a="0"))
    code, _ = operator.request("PATCH", f"{CM}/new?fieldManager=op&force=true", config_map("new", a="1"), APPLY)
    assert code == 200, "an apply to an existing object needs only patch"


def test_network_policies_are_served_and_server_side_applied(cluster):
    """The operator applies a NetworkPolicy per job role; the stand-in stores and serves them (it
    does not enforce them)."""
    path = "/apis/networking.k8s.io/v1/namespaces/weir-e2e/networkpolicies"
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "wc-worker", "namespace": "weir-e2e"},
              "spec": {"podSelector": {"matchLabels": {"weir.dev/job": "wc"}}, "policyTypes": ["Ingress"],
                       "ingress": [{"ports": [{"protocol": "TCP", "port": 6124}]}]}}
    code, created = cluster.admin.request("PATCH", f"{path}/wc-worker?fieldManager=weir-operator&force=true",
                                          policy, APPLY)
    assert code in (200, 201), created
    code, listed = cluster.admin.request("GET", path)
    assert code == 200 and [p["metadata"]["name"] for p in listed["items"]] == ["wc-worker"]
    assert listed["items"][0]["spec"]["ingress"][0]["ports"][0]["port"] == 6124
