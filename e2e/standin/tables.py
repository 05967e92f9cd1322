"""`meta.k8s.io/v1` Table rendering for `kubectl get` without `-o`: the columns kubectl users
know for the kinds the suite prints, and a CRD's `additionalPrinterColumns`."""

from __future__ import annotations

import datetime

import objects


def _age(stamp: str | None) -> str:
    if not stamp:
        return "<unknown>"
    try:
        then = datetime.datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<unknown>"
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m" if seconds < 7200 else f"{seconds // 3600}h"


def _json_path(obj: dict, path: str):
    value = objects.get_path(obj, [p for p in path.strip(".").split(".") if p])
    return "" if value is None else value


def _pod_row(p: dict) -> list:
    statuses = (p.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    phase = (p.get("status") or {}).get("phase", "Pending")
    for s in statuses:
        waiting = (s.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            phase = waiting["reason"]
    if p["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    restarts = sum(s.get("restartCount", 0) for s in statuses)
    return [f"{ready}/{len(statuses) or len(p['spec'].get('containers') or [])}", phase, restarts,
            _age(p["metadata"].get("creationTimestamp")), (p.get("status") or {}).get("podIP", "<none>")]


COLUMNS = {
    ("", "pods"): (["Ready", "Status", "Restarts", "Age", "IP"], _pod_row),
    ("apps", "deployments"): (["Ready", "Up-to-date", "Available", "Age"], lambda d: [
        f"{(d.get('status') or {}).get('readyReplicas', 0)}/{d['spec'].get('replicas', 1)}",
        (d.get("status") or {}).get("updatedReplicas", 0), (d.get("status") or {}).get("availableReplicas", 0),
        _age(d["metadata"].get("creationTimestamp"))]),
    ("apps", "statefulsets"): (["Ready", "Age"], lambda s: [
        f"{(s.get('status') or {}).get('readyReplicas', 0)}/{s['spec'].get('replicas', 1)}",
        _age(s["metadata"].get("creationTimestamp"))]),
    ("", "services"): (["Type", "Cluster-IP", "Ports", "Age"], lambda s: [
        s["spec"].get("type", "ClusterIP"), s["spec"].get("clusterIP", "<pending>"),
        ",".join(f"{p['port']}/{p.get('protocol', 'TCP')}" for p in s["spec"].get("ports") or []),
        _age(s["metadata"].get("creationTimestamp"))]),
    ("", "events"): (["Last Seen", "Type", "Reason", "Object", "Message"], lambda e: [
        _age(e.get("lastTimestamp") or e.get("eventTime")), e.get("type", ""), e.get("reason", ""),
        f"{(e.get('involvedObject') or {}).get('kind', '').lower()}/{(e.get('involvedObject') or {}).get('name', '')}",
        e.get("message", "")]),
}


def table(kind, items: list, rv: str) -> dict:
    """The Table of `items` of `kind` (a registry Kind)."""
    spec = COLUMNS.get((kind.group, kind.plural))
    if spec:
        names, row = spec
    elif kind.printer_columns:
        names = [c["name"] for c in kind.printer_columns]
        row = lambda o: [_age(_json_path(o, c["jsonPath"])) if c.get("type") == "date"
                         else _json_path(o, c["jsonPath"]) for c in kind.printer_columns]
    else:
        names, row = ["Age"], lambda o: [_age(o["metadata"].get("creationTimestamp"))]
    definitions = [{"name": "Name", "type": "string", "format": "name"}] + \
        [{"name": n, "type": "string", "format": ""} for n in names]
    rows = [{"cells": [o["metadata"]["name"]] + row(o), "object": {
        "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}} for o in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": definitions, "rows": rows}
