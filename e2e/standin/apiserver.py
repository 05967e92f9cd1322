"""The HTTP face of the stand-in: Kubernetes REST paths, discovery, watches, RBAC, the scale and
status subresources, pod logs, the service proxy, and an HTTP forward proxy that resolves
Service DNS names (the operator reaches coordinators through it; see docs/operator/standin.md).
"""

from __future__ import annotations

import copy
import http.client
import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

import objects
import rbac
import tables
from registry import Kind
from store import ApiError, Store

PATCH_TYPES = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+cbor": "apply",
}
VERSION = {"major": "1", "minor": "35", "gitVersion": "v1.35.0-weir-standin", "platform": "linux/amd64"}
BOOKMARK_SECONDS = 5.0


class Tokens:
    """Bearer tokens to (user, groups)."""

    def __init__(self) -> None:
        self.users = {"standin-admin": ("kubernetes-admin", ["system:masters", "system:authenticated"])}

    def service_account(self, namespace: str, name: str) -> str:
        token = f"sa.{namespace}.{name}"
        self.users[token] = (f"system:serviceaccount:{namespace}:{name}",
                             ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"])
        return token


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, store: Store, tokens: Tokens, request_log: rbac.RequestLog, network=None,
                 kubelet=None) -> None:
        super().__init__(addr, Handler)
        self.store, self.tokens, self.request_log = store, tokens, request_log
        self.network, self.kubelet = network, kubelet
        self.stopping = threading.Event()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer

    def log_message(self, fmt, *args) -> None:  # quiet; the request log records what matters
        pass

    # --- plumbing --------------------------------------------------------------------------------

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def send_json(self, code: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_error_status(self, e: ApiError) -> None:
        self.send_json(e.code, e.status())

    def read_raw(self) -> bytes:
        if getattr(self, "_raw", None) is None:
            length = int(self.headers.get("Content-Length") or 0)
            self._raw = self.rfile.read(length) if length else b""
        return self._raw

    def read_body(self):
        raw = self.read_raw()
        if not raw:
            return None
        ctype = (self.headers.get("Content-Type") or "").split(";")[0]
        if "protobuf" in ctype or "cbor" in ctype:
            raise ApiError(415, "UnsupportedMediaType", f"the stand-in serves JSON only, not {ctype}")
        try:
            if ctype.endswith("yaml"):
                return yaml.safe_load(raw)
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise ApiError(400, "BadRequest", f"the body of the request could not be decoded: {e}")

    def dispatch(self, method: str) -> None:
        self._raw = None
        self.read_raw()
        if self.path.startswith("http://"):
            return self.forward_proxy(method)
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        parts = [urllib.parse.unquote(p) for p in url.path.strip("/").split("/") if p]
        try:
            user, groups = self.authenticate()
            if not parts or parts[0] not in ("api", "apis") or len(parts) <= (1 if parts[0] == "api" else 2):
                return self.discovery(parts)
            if parts[0] == "apis" and len(parts) == 3:
                return self.discovery(parts)
            if parts[0] == "api" and len(parts) == 2:
                return self.discovery(parts)
            self.resource_request(method, parts, query, user, groups)
        except ApiError as e:
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def authenticate(self):
        auth = self.headers.get("Authorization") or ""
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if token not in self.server.tokens.users:
            raise ApiError(401, "Unauthorized", "Unauthorized")
        return self.server.tokens.users[token]

    # --- discovery -------------------------------------------------------------------------------

    def discovery(self, parts: list) -> None:
        reg = self.server.store.registry
        if parts == ["version"]:
            return self.send_json(200, VERSION)
        if parts in (["healthz"], ["readyz"], ["livez"]):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(data)
            return
        if parts[:2] == ["openapi", "v3"]:
            return self.openapi_v3(parts[2:])
        if parts == ["api"]:
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            groups = []
            for g, versions in sorted(reg.groups().items()):
                if not g:
                    continue
                vs = [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(versions)]
                groups.append({"name": g, "versions": vs, "preferredVersion": vs[0]})
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2] if len(parts) > 2 else "")
        kinds = [k for k in reg.kinds.values() if k.group == group and (not version or k.version == version)]
        if not kinds:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if parts[0] == "apis" and len(parts) == 2:
            vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted({k.version for k in kinds})]
            return self.send_json(200, {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": vs,
                                        "preferredVersion": vs[0]})
        resources = []
        for k in kinds:
            resources.append({"name": k.plural, "singularName": k.kind.lower(), "namespaced": k.namespaced,
                              "kind": k.kind, "verbs": rbac_verbs(), "shortNames": k.short_names,
                              "categories": k.categories})
            if k.status_subresource:
                resources.append({"name": f"{k.plural}/status", "singularName": "", "namespaced": k.namespaced,
                                  "kind": k.kind, "verbs": ["get", "patch", "update"]})
            if k.scale:
                resources.append({"name": f"{k.plural}/scale", "singularName": "", "namespaced": k.namespaced,
                                  "group": "autoscaling", "version": "v1", "kind": "Scale",
                                  "verbs": ["get", "patch", "update"]})
            if k.plural == "pods" and not k.group:
                resources.append({"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                                  "verbs": ["get"]})
        self.send_json(200, {"kind": "APIResourceList", "apiVersion": "v1",
                             "groupVersion": f"{group}/{version}" if group else version, "resources": resources})

    def openapi_v3(self, rest: list) -> None:
        """Just enough OpenAPI v3 for kubectl: the group-version index and, per group-version,
        PATCH operations that declare `fieldValidation`, so kubectl leaves validation to the
        server (which the stand-in does from the CRD schemas) instead of validating offline."""
        reg = self.server.store.registry
        gvs = sorted({("api/" + k.version) if not k.group else f"apis/{k.group}/{k.version}"
                      for k in reg.kinds.values()})
        if not rest:
            return self.send_json(200, {"paths": {gv: {"serverRelativeURL": f"/openapi/v3/{gv}?hash=standin"}
                                                  for gv in gvs}})
        gv = "/".join(rest)
        if gv not in gvs:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        paths = {}
        for k in reg.kinds.values():
            if (("api/" + k.version) if not k.group else f"apis/{k.group}/{k.version}") != gv:
                continue
            base = f"/{gv}/namespaces/{{namespace}}/{k.plural}" if k.namespaced else f"/{gv}/{k.plural}"
            gvk = {"group": k.group, "version": k.version, "kind": k.kind}
            params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                      {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                      {"name": "dryRun", "in": "query", "schema": {"type": "string"}}]
            op = {"x-kubernetes-group-version-kind": gvk, "parameters": params, "responses": {}}
            paths[base] = {"post": dict(op, **{"x-kubernetes-action": "post"})}
            paths[base + "/{name}"] = {"patch": dict(op, **{"x-kubernetes-action": "patch"}),
                                       "put": dict(op, **{"x-kubernetes-action": "put"})}
        self.send_json(200, {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
                             "paths": paths, "components": {"schemas": {}}})

    # --- resources -------------------------------------------------------------------------------

    def parse_resource_path(self, parts: list):
        reg = self.server.store.registry
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        else:
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace = ""
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = reg.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        kind = reg.get(group, version, rest[0])
        if kind is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        tail = "/".join(rest[3:])
        return kind, namespace, name, sub, tail

    def resource_request(self, method: str, parts: list, query: dict, user: str, groups: list) -> None:
        kind, namespace, name, sub, tail = self.parse_resource_path(parts)
        watch = query.get("watch") in ("1", "true")
        verb = {"GET": "watch" if watch else ("get" if name else "list"), "POST": "create", "PUT": "update",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
        if sub == "proxy" and method == "GET":
            verb = "get"
        resource = f"{kind.plural}/{sub}" if sub else kind.plural
        attrs = rbac.Attributes(user, groups, verb, kind.group, resource, namespace, name)
        store = self.server.store
        allowed = rbac.authorize(attrs, *self.rbac_snapshot())
        if not allowed:
            self.server.request_log.record(attrs, 403)
            raise ApiError(403, "Forbidden", rbac.forbidden_message(attrs),
                           {"name": name, "group": kind.group, "kind": kind.plural})
        code = 200
        try:
            if sub == "proxy" and kind.plural == "services":
                return self.service_proxy(method, namespace, name, tail, query)
            if sub == "log" and kind.plural == "pods":
                return self.pod_log(namespace, name, query)
            if sub == "scale":
                return self.scale(method, kind, namespace, name, query, user)
            if sub and sub != "status":
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({sub})")
            if method == "GET" and watch:
                self.server.request_log.record(attrs, 200)
                code = None
                return self.watch(kind, namespace, query)
            if method == "GET" and name:
                obj = store.get(kind, namespace, name)
                if "as=Table" in (self.headers.get("Accept") or ""):
                    return self.send_json(200, tables.table(kind, [obj], obj["metadata"]["resourceVersion"]))
                return self.send_json(200, obj)
            if method == "GET":
                return self.list(kind, namespace, query)
            manager = query.get("fieldManager") or (self.headers.get("User-Agent") or "unknown").split("/")[0]
            unknown: list = []
            if method == "POST":
                body = self.require_object(kind)
                result = store.create(kind, namespace, body, manager=manager, dry_run="dryRun" in query,
                                      unknown_out=unknown)
                code = 201
            elif method == "PUT":
                body = self.require_object(kind)
                result = store.update(kind, namespace, name, body, manager=manager, subresource=sub,
                                      unknown_out=unknown)
            elif method == "PATCH":
                ctype = (self.headers.get("Content-Type") or "").split(";")[0]
                if ctype not in PATCH_TYPES:
                    raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format"
                                   f" - accepted media types include: {', '.join(PATCH_TYPES)}")
                body = self.read_body()
                if PATCH_TYPES[ctype] == "apply":
                    manager = query.get("fieldManager", "")  # required for apply, never defaulted
                    if not sub and store.try_get(kind, namespace, name) is None:
                        # An apply that creates is authorized as `create` too, as upstream does.
                        create = rbac.Attributes(user, groups, "create", kind.group, resource, namespace, name)
                        granted = rbac.authorize(create, *self.rbac_snapshot())
                        self.server.request_log.record(create, 201 if granted else 403)
                        if not granted:
                            raise ApiError(403, "Forbidden", rbac.forbidden_message(create),
                                           {"name": name, "group": kind.group, "kind": kind.plural})
                result = store.patch(kind, namespace, name, PATCH_TYPES[ctype], body, manager=manager,
                                     subresource=sub, force=query.get("force") in ("true", "1"), unknown_out=unknown)
            else:
                result = self.delete(kind, namespace, name, query)
            headers = self.unknown_field_policy(query, unknown)
            self.send_json(code, result, headers)
        except ApiError as e:
            code = e.code
            raise
        finally:
            if code is not None:
                self.server.request_log.record(attrs, code)

    def rbac_snapshot(self):
        reg, store = self.server.store.registry, self.server.store
        roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r.get("rules") or []
                 for r in store.list(reg.get("rbac.authorization.k8s.io", "v1", "roles"), None)[0]}
        cluster_roles = {r["metadata"]["name"]: r.get("rules") or []
                         for r in store.list(reg.get("rbac.authorization.k8s.io", "v1", "clusterroles"), None)[0]}
        rbs = store.list(reg.get("rbac.authorization.k8s.io", "v1", "rolebindings"), None)[0]
        crbs = store.list(reg.get("rbac.authorization.k8s.io", "v1", "clusterrolebindings"), None)[0]
        return roles, cluster_roles, rbs, crbs

    def unknown_field_policy(self, query: dict, unknown: list) -> dict:
        if not unknown:
            return {}
        policy = query.get("fieldValidation", "Warn")
        if policy == "Strict":
            raise ApiError(400, "BadRequest", "strict decoding error: " +
                           ", ".join(f'unknown field "{p}"' for p in unknown))
        if policy == "Warn":
            return {"Warning": ", ".join(f'299 - "unknown field \\"{p}\\""' for p in unknown)}
        return {}

    def require_object(self, kind: Kind) -> dict:
        body = self.read_body()
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be an object")
        if body.get("kind") and body.get("kind") != kind.kind:
            raise ApiError(400, "BadRequest", f"the kind of the body ({body.get('kind')}) does not match {kind.kind}")
        if kind.plural == "customresourcedefinitions":
            self.check_crd(body)
        return body

    def check_crd(self, crd: dict) -> None:
        try:
            spec = crd["spec"]
            _ = spec["group"], spec["names"]["plural"], spec["names"]["kind"], spec["versions"]
        except (KeyError, TypeError) as e:
            raise ApiError(422, "Invalid", f"CustomResourceDefinition is invalid: spec: missing {e}")

    def list(self, kind: Kind, namespace: str, query: dict) -> None:
        store = self.server.store
        try:
            items, rv = store.list(kind, namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e))
        if kind.group == "" and kind.plural == "events":
            items = items + self.core_view_of_new_events(namespace, query)
        if "as=Table" in (self.headers.get("Accept") or ""):
            return self.send_json(200, tables.table(kind, items, rv))
        self.send_json(200, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                             "metadata": {"resourceVersion": rv}, "items": items})

    def core_view_of_new_events(self, namespace: str, query: dict) -> list:
        """events.k8s.io/v1 Events as the core/v1 view shows them (one storage, two versions)."""
        store = self.server.store
        kind = store.registry.get("events.k8s.io", "v1", "events")
        out = []
        for e in store.list(kind, namespace)[0]:
            series = e.get("series") or {}
            core = {"apiVersion": "v1", "kind": "Event", "metadata": e["metadata"],
                    "involvedObject": e.get("regarding") or {}, "related": e.get("related"),
                    "reason": e.get("reason"), "message": e.get("note"), "type": e.get("type"),
                    "action": e.get("action"), "eventTime": e.get("eventTime"),
                    "reportingComponent": e.get("reportingController"),
                    "reportingInstance": e.get("reportingInstance"),
                    "source": {"component": e.get("reportingController")},
                    "count": series.get("count", e.get("deprecatedCount") or 1),
                    "firstTimestamp": e.get("deprecatedFirstTimestamp") or e.get("eventTime"),
                    "lastTimestamp": series.get("lastObservedTime") or e.get("deprecatedLastTimestamp")
                    or e.get("eventTime")}
            out.append(core)
        try:
            fields = objects.parse_field_selector(query.get("fieldSelector", ""))
            labels = objects.parse_label_selector(query.get("labelSelector", ""))
        except ValueError as e:
            raise ApiError(400, "BadRequest", str(e))
        return [e for e in out if objects.fields_match(fields, e)
                and objects.labels_match(labels, e["metadata"].get("labels"))]

    def watch(self, kind: Kind, namespace: str, query: dict) -> None:
        store = self.server.store
        labels = objects.parse_label_selector(query.get("labelSelector", ""))
        fields = objects.parse_field_selector(query.get("fieldSelector", ""))
        timeout = min(float(query.get("timeoutSeconds") or 1800), 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        rv_text = query.get("resourceVersion", "")
        initial = []
        initial_end = query.get("sendInitialEvents") == "true"
        if initial_end or rv_text in ("", "0"):
            items, rv = store.list(kind, namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
            initial = [("ADDED", o) for o in items]
            since = int(rv)
        else:
            try:
                since = int(rv_text)
            except ValueError:
                raise ApiError(400, "BadRequest", f"invalid resource version: {rv_text}")
            # A resourceVersion older than the history is answered as the API server does: 200
            # and an ERROR event carrying the 410 Expired Status, after which the client relists
            # (kube-runtime's watcher relists only on that event; an HTTP 410 it just retries).
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def emit(event_type: str, obj: dict) -> None:
            data = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def matches(obj: dict) -> bool:
            meta = obj["metadata"]
            return ((not namespace or meta.get("namespace") == namespace)
                    and objects.labels_match(labels, meta.get("labels")) and objects.fields_match(fields, obj))

        deadline = time.monotonic() + timeout
        last_bookmark = time.monotonic()
        try:
            for event_type, obj in initial:
                emit(event_type, obj)
            if initial_end:  # WatchList: a bookmark marks the end of the initial state
                emit("BOOKMARK", {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": {
                    "resourceVersion": str(since), "annotations": {"k8s.io/initial-events-end": "true"}}})
            while time.monotonic() < deadline and not self.server.stopping.is_set():
                try:
                    with store.lock:
                        events = store.events_since(kind, since)
                        head = store.rv  # everything of this kind up to head is in `events`
                except ApiError as e:
                    emit("ERROR", e.status())  # older than the history: the client relists
                    break
                for rv, event_type, obj in events:
                    if matches(obj):
                        emit(event_type, obj)
                since = head
                if bookmarks and time.monotonic() - last_bookmark > BOOKMARK_SECONDS:
                    emit("BOOKMARK", {"kind": kind.kind, "apiVersion": kind.api_version,
                                      "metadata": {"resourceVersion": str(since)}})
                    last_bookmark = time.monotonic()
                if not events:
                    store.wait_for_change(1.0)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True

    def delete(self, kind: Kind, namespace: str, name: str, query: dict) -> dict:
        body = self.read_body() or {}
        propagation = body.get("propagationPolicy") or query.get("propagationPolicy")
        if body.get("orphanDependents") is True:
            propagation = "Orphan"
        grace = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        grace = int(grace) if grace is not None and grace != "" else None
        store = self.server.store
        if not name:
            items, _ = store.list(kind, namespace, query.get("labelSelector", ""), query.get("fieldSelector", ""))
            for o in items:
                store.delete(kind, namespace, o["metadata"]["name"], propagation, grace)
            return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": {}, "items": items}
        return store.delete(kind, namespace, name, propagation, grace, body.get("preconditions"))

    # --- subresources ----------------------------------------------------------------------------

    def scale(self, method: str, kind: Kind, namespace: str, name: str, query: dict, user: str) -> None:
        if not kind.scale:
            raise ApiError(404, "NotFound", "the server could not find the requested resource (scale)")
        store = self.server.store
        spec_path = tuple(kind.scale["specReplicasPath"].strip(".").split("."))
        obj = store.get(kind, namespace, name)

        def scale_of(o: dict) -> dict:
            status = {"replicas": objects.get_path(o, tuple(kind.scale["statusReplicasPath"].strip(".").split(")")[0]
                                                          .split(".")), 0) or 0}
            if kind.scale.get("labelSelectorPath"):
                sel = objects.get_path(o, tuple(kind.scale["labelSelectorPath"].strip(".").split(".")))
                if sel:
                    status["selector"] = sel
            meta = o["metadata"]
            return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                    "metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "uid": meta["uid"],
                                 "resourceVersion": meta["resourceVersion"],
                                 "creationTimestamp": meta["creationTimestamp"]},
                    "spec": {"replicas": objects.get_path(o, spec_path, 0)}, "status": status}

        current = scale_of(obj)
        if method == "GET":
            return self.send_json(200, current)
        body = self.read_body()
        if method == "PUT":
            new_scale = body
        else:
            ctype = PATCH_TYPES.get((self.headers.get("Content-Type") or "").split(";")[0])
            new_scale = objects.json_patch(current, body) if ctype == "json" else objects.merge_patch(current, body)
        replicas = objects.get_path(new_scale, ("spec", "replicas"))
        if not isinstance(replicas, int):
            raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Required value')
        sent_rv = objects.get_path(new_scale, ("metadata", "resourceVersion"))
        if method == "PUT" and sent_rv and sent_rv != obj["metadata"]["resourceVersion"]:
            from store import conflict
            raise conflict(kind, name)
        updated = copy.deepcopy(obj)
        objects.set_path(updated, spec_path, replicas)
        updated["metadata"].pop("managedFields", None)
        manager = query.get("fieldManager") or (self.headers.get("User-Agent") or "unknown").split("/")[0]
        result = store.update(kind, namespace, name, updated, manager=manager)
        self.send_json(200, scale_of(result))

    def pod_log(self, namespace: str, name: str, query: dict) -> None:
        self.server.store.get(self.server.store.registry.get("", "v1", "pods"), namespace, name)
        kubelet = self.server.kubelet
        text = kubelet.pod_log(namespace, name, query.get("container"), query.get("previous") == "true") \
            if kubelet else None
        if text is None:
            raise ApiError(400, "BadRequest", f'previous terminated container in pod "{name}" not found')
        tail = query.get("tailLines")
        if tail and int(tail) >= 0:
            text = "\n".join(text.splitlines()[-int(tail):]) + "\n"
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def service_proxy(self, method: str, namespace: str, name: str, tail: str, query: dict) -> None:
        svc, _, port = name.partition(":")
        network = self.server.network
        target = network.resolve_service(namespace, svc, int(port) if port.isdigit() else port) if network else None
        if target is None:
            raise ApiError(503, "ServiceUnavailable", f'no endpoints available for service "{svc}"')
        path = "/" + tail + (("?" + urllib.parse.urlencode(query)) if query else "")
        self.relay(method, target, path)

    def forward_proxy(self, method: str) -> None:
        """HTTP forward proxy (HTTP_PROXY of pods): `http://svc.ns.svc:port/...` to the Service."""
        url = urllib.parse.urlsplit(self.path)
        network = self.server.network
        target = network.resolve_host(url.hostname, url.port or 80) if network else None
        if target is None:
            target = (url.hostname, url.port or 80)
        self.relay(method, target, (url.path or "/") + (f"?{url.query}" if url.query else ""), keep_auth=True)

    def relay(self, method: str, target: tuple, path: str, keep_auth: bool = False) -> None:
        """Forwards the request; a forward-proxied one keeps its Host and Authorization headers
        (S3 signatures cover them), a service-proxied one drops the API server's credentials."""
        body = self.read_raw() or None
        dropped = ("proxy-connection", "connection", "proxy-authorization") if keep_auth else \
            ("host", "authorization", "proxy-connection", "connection")
        headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
        try:
            conn = http.client.HTTPConnection(target[0], target[1], timeout=30)
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
        except OSError as e:
            data = f"error trying to reach service: {e}".encode()
            self.send_response(503)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response_only(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def rbac_verbs() -> list:
    return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
