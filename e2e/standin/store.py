"""The object store: what etcd plus the generic registry of the API server do.

- one global resourceVersion counter; every write bumps it and appends a watch event;
- optimistic concurrency: a stale `metadata.resourceVersion` (update body, patch body or delete
  precondition) is a 409 Conflict;
- `metadata.generation` is bumped only when something outside metadata and status changes;
- the status subresource: main-resource writes keep the old status, status writes keep the rest;
- server-side apply with per-manager field ownership (lists are atomic) and 409 conflicts
  unless `force`;
- finalizers and `deletionTimestamp`; foreground/background/orphan propagation;
- a bounded watch history: a watch from a resourceVersion older than the history is 410 Gone.

All methods take the store lock; the HTTP layer and the kubelet call them from many threads.
"""

from __future__ import annotations

import base64
import copy
import datetime
import threading
import uuid
from typing import Any, Callable

import objects
from admission import admit
from registry import Kind, Registry
from validation import validate_builtin


class ApiError(Exception):
    """An error answered as a `Status` object."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details, "code": self.code}


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind.group_resource} "{name}" not found',
                    {"name": name, "group": kind.group, "kind": kind.plural})


def conflict(kind: Kind, name: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.group_resource} "{name}": the '
                    "object has been modified; please apply your changes to the latest version and try again",
                    {"name": name, "group": kind.group, "kind": kind.plural})


class Store:
    def __init__(self, registry: Registry | None = None, history: int = 5000) -> None:
        self.registry = registry or Registry()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.objects: dict = {}  # (group, plural, namespace, name) -> object
        self.managers: dict = {}  # same key -> {manager: {"operation", "subresource", "paths"}}
        self.events: list = []  # (rv, type, group, plural, object)
        self.history = history
        self.oldest_rv = 1  # a watch from an rv below this is 410 Gone
        self.listeners: list = []  # callables(type, kind, obj) run after each write, lock held

    # --- reads -----------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> dict:
        with self.lock:
            obj = self.objects.get((kind.group, kind.plural, namespace or "", name))
            if obj is None:
                raise not_found(kind, name)
            return self._render(kind, obj)

    def try_get(self, kind: Kind, namespace: str | None, name: str) -> dict | None:
        try:
            return self.get(kind, namespace, name)
        except ApiError:
            return None

    def list(self, kind: Kind, namespace: str | None, label_selector: str = "", field_selector: str = "") -> tuple:
        """(items, resourceVersion) of `kind` in `namespace` (None: all namespaces)."""
        labels = objects.parse_label_selector(label_selector)
        fields = objects.parse_field_selector(field_selector)
        with self.lock:
            items = [self._render(kind, o) for (g, p, ns, _), o in sorted(self.objects.items())
                     if g == kind.group and p == kind.plural and (not namespace or ns == namespace)
                     and objects.labels_match(labels, o["metadata"].get("labels"))
                     and objects.fields_match(fields, o)]
            return items, str(self.rv)

    def _render(self, kind: Kind, obj: dict) -> dict:
        out = copy.deepcopy(obj)
        out["apiVersion"], out["kind"] = kind.api_version, kind.kind
        key = (kind.group, kind.plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        managed = []
        for manager, entry in self.managers.get(key, {}).items():
            if entry["paths"]:
                item = {"manager": manager, "operation": entry["operation"], "apiVersion": kind.api_version,
                        "time": entry["time"], "fieldsType": "FieldsV1", "fieldsV1": objects.fields_v1(entry["paths"])}
                if entry.get("subresource"):
                    item["subresource"] = entry["subresource"]
                managed.append(item)
        if managed:
            out["metadata"]["managedFields"] = managed
        return out

    # --- watch -----------------------------------------------------------------------------------

    def events_since(self, kind: Kind, since: int) -> list:
        """Watch events of `kind` after resourceVersion `since`; 410 Gone if compacted away."""
        with self.lock:
            if since < self.oldest_rv - 1:
                raise ApiError(410, "Expired", f"too old resource version: {since} ({self.oldest_rv - 1})")
            return [(rv, t, copy.deepcopy(o)) for rv, t, g, p, o in self.events
                    if rv > since and g == kind.group and p == kind.plural]

    def compact(self) -> None:
        """Forgets all watch history (as an etcd compaction does): watchers from older rvs get 410."""
        with self.lock:
            self.events.clear()
            self.oldest_rv = self.rv + 1

    def _emit(self, kind: Kind, event_type: str, obj: dict) -> None:
        rendered = self._render(kind, obj)
        self.events.append((int(obj["metadata"]["resourceVersion"]), event_type, kind.group, kind.plural, rendered))
        if len(self.events) > self.history:
            drop = len(self.events) - self.history
            self.oldest_rv = self.events[drop][0]
            del self.events[:drop]
        for listener in self.listeners:
            listener(event_type, kind, rendered)
        self.changed.notify_all()

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    # --- writes ----------------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str | None, obj: dict, manager: str = "", dry_run: bool = False,
               unknown_out: list | None = None) -> dict:
        with self.lock:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            if kind.namespaced:
                if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                    raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                   "namespace sent on the request")
                meta["namespace"] = namespace or meta.get("namespace") or "default"
                if kind.plural != "events" and not self.objects.get(("", "namespaces", "", meta["namespace"])):
                    raise ApiError(404, "NotFound", f'namespaces "{meta["namespace"]}" not found',
                                   {"name": meta["namespace"], "kind": "namespaces"})
            else:
                meta.pop("namespace", None)
            if not meta.get("name"):
                if meta.get("generateName"):
                    meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
                else:
                    raise ApiError(422, "Invalid", f"{kind.kind}.{kind.group or 'core'} \"\" is invalid: "
                                   "metadata.name: Required value: name or generateName is required")
            key = (kind.group, kind.plural, meta.get("namespace", ""), meta["name"])
            if key in self.objects:
                raise ApiError(409, "AlreadyExists", f'{kind.group_resource} "{meta["name"]}" already exists',
                               {"name": meta["name"], "group": kind.group, "kind": kind.plural})
            for f in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "managedFields",
                      "generation", "deletionGracePeriodSeconds"):
                meta.pop(f, None)
            if kind.status_subresource and kind.plural not in ("pods", "namespaces", "services"):
                obj.pop("status", None)
            obj = self._admit(kind, obj, None, unknown_out)
            meta = obj["metadata"]
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            meta["generation"] = 1
            if kind.plural == "namespaces":
                obj.setdefault("status", {"phase": "Active"})
            if dry_run:
                meta["resourceVersion"] = str(self.rv)
                return self._render(kind, obj)
            meta["resourceVersion"] = self._next_rv()
            self.objects[key] = obj
            self.managers[key] = {}
            if manager:
                self._take_ownership(key, manager, "Update", "", objects.owned_paths(obj))
            self._emit(kind, "ADDED", obj)
            return self._render(kind, obj)

    def _admit(self, kind: Kind, obj: dict, old: dict | None, unknown_out: list | None) -> dict:
        if kind.group == "" and kind.plural == "secrets" and "stringData" in obj:
            # stringData is write-only: merged into data (base64) as the API server does.
            obj["data"] = dict(obj.get("data") or {}, **{k: base64.b64encode(str(v).encode()).decode()
                                                         for k, v in (obj.pop("stringData") or {}).items()})
        if kind.schema is None:
            errors = validate_builtin(kind.group, kind.plural, obj)
            if errors:
                name = obj["metadata"].get("name", "")
                text = ", ".join(f"{p}: {m}" for p, m in errors)
                raise ApiError(422, "Invalid", f'{kind.kind}{"." + kind.group if kind.group else ""} "{name}" is '
                               f"invalid: {text}", {"name": name, "group": kind.group, "kind": kind.kind, "causes": [
                                   {"reason": "FieldValueInvalid", "message": m, "field": p} for p, m in errors]})
            return obj
        admitted, unknown, errors = admit(kind.schema, obj, old)
        if unknown_out is not None:
            unknown_out.extend(unknown)
        if errors:
            name = obj["metadata"].get("name", "")
            text = ", ".join(f"{p}: {m}" for p, m in errors)
            raise ApiError(422, "Invalid", f'{kind.kind}.{kind.group} "{name}" is invalid: {text}',
                           {"name": name, "group": kind.group, "kind": kind.kind,
                            "causes": [{"reason": "FieldValueInvalid", "message": m, "field": p} for p, m in errors]})
        return admitted

    def update(self, kind: Kind, namespace: str | None, name: str, new: dict, manager: str = "",
               subresource: str = "", operation: str = "Update", unknown_out: list | None = None,
               check_rv: bool = True) -> dict:
        """Replaces an object (PUT semantics). A `metadata.resourceVersion` in `new` must match."""
        with self.lock:
            key = (kind.group, kind.plural, namespace or "", name)
            old = self.objects.get(key)
            if old is None:
                raise not_found(kind, name)
            new = copy.deepcopy(new)
            meta = new.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
            sent_rv = meta.get("resourceVersion")
            if check_rv and sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise conflict(kind, name)
            merged = self._apply_subresource_split(kind, old, new, subresource)
            merged = self._admit(kind, merged, old, unknown_out)
            return self._commit(kind, key, old, merged, manager, subresource, operation)

    def _apply_subresource_split(self, kind: Kind, old: dict, new: dict, subresource: str) -> dict:
        """The status subresource: `status` writes change only status; main writes keep status."""
        if subresource == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            return merged
        merged = copy.deepcopy(new)
        if kind.status_subresource:
            if "status" in old:
                merged["status"] = copy.deepcopy(old["status"])
            else:
                merged.pop("status", None)
        meta = merged.setdefault("metadata", {})
        for f in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                  "namespace", "name"):
            if f in old["metadata"]:
                meta[f] = old["metadata"][f]
            else:
                meta.pop(f, None)
        meta.pop("managedFields", None)
        if old["metadata"].get("deletionTimestamp"):
            added = set(meta.get("finalizers") or []) - set(old["metadata"].get("finalizers") or [])
            if added:
                raise ApiError(422, "Invalid", f'{kind.kind} "{meta["name"]}" is invalid: metadata.finalizers: '
                               f"Forbidden: no new finalizers can be added if the object is being deleted, "
                               f"found new finalizers {sorted(added)}")
        return merged

    def _commit(self, kind: Kind, key: tuple, old: dict, new: dict, manager: str, subresource: str,
                operation: str) -> dict:
        strip = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status", "apiVersion", "kind")}
        old_cmp = dict(old, metadata={k: v for k, v in old["metadata"].items() if k != "resourceVersion"})
        new_cmp = dict(new, metadata={k: v for k, v in new["metadata"].items() if k != "resourceVersion"})
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        old_cmp["apiVersion"], old_cmp["kind"] = kind.api_version, kind.kind
        if old_cmp == new_cmp:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self._render(kind, old)  # a no-op write keeps the resourceVersion
        if strip(old) != strip(new):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        if manager:
            changed = {p for p in objects.owned_paths(new) | objects.owned_paths(old)
                       if objects.get_path(new, p) != objects.get_path(old, p)}
            changed = {p for p in changed if objects.get_path(new, p) is not None}
            self._take_ownership(key, manager, operation, subresource, changed, merge=True)
        new["metadata"]["resourceVersion"] = self._next_rv()
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self.objects.pop(key)
            self.managers.pop(key, None)
            self._emit(kind, "DELETED", new)
            self._after_delete(kind, new)
            return self._render(kind, new)
        self.objects[key] = new
        self._emit(kind, "MODIFIED", new)
        return self._render(kind, new)

    def _take_ownership(self, key: tuple, manager: str, operation: str, subresource: str, paths: set,
                        merge: bool = False) -> None:
        table = self.managers.setdefault(key, {})
        for other, entry in table.items():
            if other != manager:
                entry["paths"] = {p for p in entry["paths"] if not any(objects.overlaps(p, q) for q in paths)}
        entry = table.setdefault(manager, {"paths": set()})
        entry["paths"] = (entry["paths"] | paths) if merge else set(paths)
        entry.update(operation=operation, subresource=subresource, time=now())

    def patch(self, kind: Kind, namespace: str | None, name: str, patch_type: str, body: Any, manager: str = "",
              subresource: str = "", force: bool = False, unknown_out: list | None = None) -> dict:
        """PATCH with `patch_type` one of merge, strategic, json, apply."""
        with self.lock:
            key = (kind.group, kind.plural, namespace or "", name)
            old = self.objects.get(key)
            if patch_type == "apply":
                return self._apply(kind, namespace, name, body, manager, subresource, force, unknown_out)
            if old is None:
                raise not_found(kind, name)
            current = self._render(kind, old)
            current["metadata"].pop("managedFields", None)
            try:
                if patch_type == "merge":
                    new = objects.merge_patch(current, body)
                elif patch_type == "strategic":
                    new = objects.strategic_merge_patch(current, body)
                else:
                    new = objects.json_patch(current, body)
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ApiError(422, "Invalid", f"the patch could not be applied: {e}")
            sent_rv = objects.get_path(body, ("metadata", "resourceVersion")) if isinstance(body, dict) else None
            if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
                raise conflict(kind, name)
            new.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
            return self.update(kind, namespace, name, new, manager, subresource, "Update", unknown_out)

    def _apply(self, kind: Kind, namespace: str | None, name: str, applied: dict, manager: str,
               subresource: str, force: bool, unknown_out: list | None) -> dict:
        if not manager:
            raise ApiError(400, "BadRequest", "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required "
                           "value: is required for apply patch")
        if not isinstance(applied, dict) or not applied.get("apiVersion") or not applied.get("kind"):
            raise ApiError(400, "BadRequest", "apiVersion and kind must be set in an apply patch")
        key = (kind.group, kind.plural, namespace or "", name)
        old = self.objects.get(key)
        applied = copy.deepcopy(applied)
        applied.setdefault("metadata", {})["name"] = name
        if kind.status_subresource:
            if subresource == "status":
                applied = {k: v for k, v in applied.items() if k in ("apiVersion", "kind", "metadata", "status")}
            else:
                applied.pop("status", None)
        paths = objects.owned_paths(applied)
        if subresource == "status":
            paths = {p for p in paths if p[0] == "status"}
        if old is None:
            if subresource:
                raise not_found(kind, name)
            created = self.create(kind, namespace, applied, unknown_out=unknown_out)
            key = (kind.group, kind.plural, created["metadata"].get("namespace", ""), name)
            self._take_ownership(key, manager, "Apply", "", paths)
            return self._render(kind, self.objects[key])
        sent_rv = applied["metadata"].get("resourceVersion")
        if sent_rv and sent_rv != old["metadata"]["resourceVersion"]:
            raise conflict(kind, name)
        table = self.managers.setdefault(key, {})
        conflicts = []
        for other, entry in table.items():
            if other == manager:
                continue
            for owned in entry["paths"]:
                for p in paths:
                    if objects.overlaps(owned, p) and objects.get_path(old, owned) != objects.get_path(applied, owned):
                        conflicts.append((other, owned))
        if conflicts and not force:
            causes = [{"reason": "FieldManagerConflict", "message": f'conflict with "{m}"',
                       "field": objects.path_text(p)} for m, p in sorted(set(conflicts))]
            lines = "\n".join(f'- conflict with "{m}": {objects.path_text(p)}' for m, p in sorted(set(conflicts)))
            raise ApiError(409, "Conflict", f"Apply failed with {len(causes)} conflict"
                           f"{'s' if len(causes) > 1 else ''}: {lines}",
                           {"name": name, "group": kind.group, "kind": kind.plural, "causes": causes})
        new = self._render(kind, old)
        new["metadata"].pop("managedFields", None)
        previously = table.get(manager, {}).get("paths", set())
        others = set().union(*[e["paths"] for m, e in table.items() if m != manager]) if len(table) > 1 else set()
        for p in previously - paths:
            if not any(objects.overlaps(p, q) for q in others):
                objects.delete_path(new, p)
        new = objects.merge_patch(new, _without_nulls(applied))
        if "finalizers" in applied["metadata"]:
            new["metadata"]["finalizers"] = applied["metadata"]["finalizers"]
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        merged = self._apply_subresource_split(kind, old, new, subresource)
        merged = self._admit(kind, merged, old, unknown_out)
        result = self._commit(kind, key, old, merged, "", subresource, "Apply")
        self._take_ownership(key, manager, "Apply", subresource, paths)
        return self._render(kind, self.objects.get(key, merged)) if key in self.objects else result

    def delete(self, kind: Kind, namespace: str | None, name: str, propagation: str | None = None,
               grace_seconds: int | None = None, preconditions: dict | None = None) -> dict:
        """Deletes now, or sets `deletionTimestamp` when finalizers remain (and for pods, whose
        kubelet finishes the deletion after the grace period)."""
        with self.lock:
            key = (kind.group, kind.plural, namespace or "", name)
            old = self.objects.get(key)
            if old is None:
                raise not_found(kind, name)
            pre = preconditions or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.group_resource} "{name}": '
                               f'Precondition failed: UID in precondition: {pre["uid"]}, UID in object meta: '
                               f'{old["metadata"]["uid"]}')
            if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.group_resource} "{name}": '
                               f'Precondition failed: ResourceVersion in precondition: {pre["resourceVersion"]}, '
                               f'ResourceVersion in object meta: {old["metadata"]["resourceVersion"]}')
            new = copy.deepcopy(old)
            meta = new["metadata"]
            finalizers = list(meta.get("finalizers") or [])
            if propagation == "Foreground" and "foregroundDeletion" not in finalizers and not meta.get("deletionTimestamp"):
                finalizers.append("foregroundDeletion")
            if propagation == "Orphan" and "orphan" not in finalizers and not meta.get("deletionTimestamp"):
                finalizers.append("orphan")
            graceful_pod = kind.plural == "pods" and grace_seconds != 0 and kind.group == ""
            if not finalizers and not graceful_pod:
                self.objects.pop(key)
                self.managers.pop(key, None)
                meta["resourceVersion"] = self._next_rv()
                self._emit(kind, "DELETED", new)
                self._after_delete(kind, new)
                return self._render(kind, new)
            if meta.get("deletionTimestamp"):
                if graceful_pod and grace_seconds is not None:
                    meta["deletionGracePeriodSeconds"] = min(grace_seconds, meta.get("deletionGracePeriodSeconds", grace_seconds))
                else:
                    return self._render(kind, old)
            else:
                meta["deletionTimestamp"] = now()
                # The API server bumps a set generation on the first graceful deletion (controllers
                # filtering on generation see it: apiserver rest.BeforeDelete and the generic
                # store's updateForGracefulDeletionAndFinalizers).
                if meta.get("generation", 0) > 0:
                    meta["generation"] = meta["generation"] + 1
                if graceful_pod:
                    default_grace = objects.get_path(old, ("spec", "terminationGracePeriodSeconds"), 30)
                    meta["deletionGracePeriodSeconds"] = default_grace if grace_seconds is None else grace_seconds
                else:
                    meta["deletionGracePeriodSeconds"] = 0
            meta["finalizers"] = finalizers
            if not finalizers:
                meta.pop("finalizers")
            meta["resourceVersion"] = self._next_rv()
            self.objects[key] = new
            self._emit(kind, "MODIFIED", new)
            return self._render(kind, new)

    def remove_now(self, kind: Kind, namespace: str | None, name: str) -> None:
        """Removes an object whatever its finalizers (the kubelet after a pod's containers stopped)."""
        with self.lock:
            key = (kind.group, kind.plural, namespace or "", name)
            old = self.objects.pop(key, None)
            if old is None:
                return
            self.managers.pop(key, None)
            old = copy.deepcopy(old)
            old["metadata"]["resourceVersion"] = self._next_rv()
            self._emit(kind, "DELETED", old)
            self._after_delete(kind, old)

    def _after_delete(self, kind: Kind, obj: dict) -> None:
        if kind.group == "apiextensions.k8s.io" and kind.plural == "customresourcedefinitions":
            self.registry.remove_group_resource(obj["spec"]["group"], obj["spec"]["names"]["plural"])

    # --- garbage collection ----------------------------------------------------------------------

    def collect_garbage(self) -> None:
        """One pass of the garbage collector: dependents of deleted owners are deleted
        (background) or orphaned; owners waiting in foregroundDeletion/orphan finalizers are
        released once their dependents are gone/orphaned."""
        with self.lock:
            uids = {o["metadata"]["uid"]: key for key, o in self.objects.items()}
            dependents: dict = {}
            for key, o in list(self.objects.items()):
                for ref in o["metadata"].get("ownerReferences") or []:
                    dependents.setdefault(ref.get("uid"), []).append(key)
            for key, o in list(self.objects.items()):
                refs = o["metadata"].get("ownerReferences") or []
                if refs and all(r.get("uid") not in uids for r in refs):
                    kind = self._kind_of(key)
                    if kind and not o["metadata"].get("deletionTimestamp"):
                        self.delete(kind, key[2], key[3], propagation="Background")
            for key, o in list(self.objects.items()):
                meta = o["metadata"]
                if not meta.get("deletionTimestamp"):
                    continue
                finalizers = meta.get("finalizers") or []
                kind = self._kind_of(key)
                deps = [d for d in dependents.get(meta["uid"], []) if d in self.objects]
                if "orphan" in finalizers:
                    for d in deps:
                        dep = copy.deepcopy(self.objects[d])
                        dep["metadata"]["ownerReferences"] = [r for r in dep["metadata"].get("ownerReferences", [])
                                                              if r.get("uid") != meta["uid"]]
                        self._commit(self._kind_of(d), d, self.objects[d], dep, "", "", "Update")
                    self._drop_finalizer(kind, key, "orphan")
                elif "foregroundDeletion" in finalizers:
                    for d in deps:
                        dkind = self._kind_of(d)
                        if dkind and not self.objects[d]["metadata"].get("deletionTimestamp"):
                            self.delete(dkind, d[2], d[3], propagation="Background")
                    if not [d for d in deps if d in self.objects]:
                        self._drop_finalizer(kind, key, "foregroundDeletion")

    def _drop_finalizer(self, kind: Kind, key: tuple, finalizer: str) -> None:
        old = self.objects.get(key)
        if old is None:
            return
        new = copy.deepcopy(old)
        new["metadata"]["finalizers"] = [f for f in old["metadata"].get("finalizers", []) if f != finalizer]
        if not new["metadata"]["finalizers"]:
            del new["metadata"]["finalizers"]
        self._commit(kind, key, old, new, "", "", "Update")

    def _kind_of(self, key: tuple) -> Kind | None:
        for k in self.registry.kinds.values():
            if k.group == key[0] and k.plural == key[1]:
                return k
        return None

    def wait_for_change(self, timeout: float) -> None:
        with self.changed:
            self.changed.wait(timeout)

    def add_listener(self, fn: Callable) -> None:
        self.listeners.append(fn)


def _without_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_without_nulls(x) for x in v]
    return v
