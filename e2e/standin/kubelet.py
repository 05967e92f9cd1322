"""The workload controllers and a process kubelet.

Deployment and StatefulSet controllers create Pods from templates (Deployment pods are owned
by the Deployment directly: there are no ReplicaSets; every template change is rolled out as
`Recreate`; a StatefulSet replaces all pods of an old revision at once). The kubelet runs each
Pod's containers as local processes:

- the command's basename is looked up in `binaries` (e.g. `weir` -> target/debug/weir);
- env: values, `$(VAR)` expansion, fieldRef (metadata.name/namespace, status.podIP, ...),
  secretKeyRef/configMapKeyRef (a missing Secret keeps the pod in CreateContainerConfigError);
- volumes: configMap and emptyDir become directories under the pod's directory; a mountPath
  that appears in an argument, in env or as workingDir is rewritten to that directory;
- `0.0.0.0` in arguments becomes the pod's own loopback IP; Service names become cluster IPs;
- automountServiceAccountToken: KUBECONFIG points at a kubeconfig with the ServiceAccount's
  token (the in-cluster config stand-in); HTTP_PROXY is the API server (cluster DNS stand-in);
- probes (httpGet, tcpSocket) polled with their delays/periods/thresholds; restartPolicy
  Always with CrashLoopBackOff (10 s doubling to 5 min); deletion: SIGTERM, then SIGKILL
  after the grace period.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request
import uuid

import objects
from store import ApiError, now

BACKOFF_START, BACKOFF_MAX = 10.0, 300.0


def template_hash(template: dict) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


class Container:
    """One running (or waiting) container process of a pod."""

    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.name = spec["name"]
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.started_at = 0.0
        self.started_text = ""
        self.last_exit: dict | None = None
        self.next_start = 0.0
        self.backoff = BACKOFF_START
        self.ready = False
        self.ready_successes = 0
        self.ready_failures = 0
        self.live_failures = 0
        self.next_probe = 0.0
        self.waiting_reason = "ContainerCreating"
        self.waiting_message = ""
        self.killing_for_liveness = False


class Pod:
    def __init__(self, namespace: str, name: str, uid: str, ip: str, directory: str) -> None:
        self.namespace, self.name, self.uid, self.ip, self.dir = namespace, name, uid, ip, directory
        self.containers: dict = {}
        self.term_sent = 0.0
        self.finished = False


class Kubelet:
    def __init__(self, store, network, root: str, binaries: dict, api_url: str, tokens, proxy_url: str = "",
                 ca_file: str = "") -> None:
        self.proxy_url, self.ca_file = proxy_url, ca_file
        self.store, self.network, self.root = store, network, root
        self.binaries, self.api_url, self.tokens = binaries, api_url, tokens
        self.pods: dict = {}  # uid -> Pod
        self.lock = threading.RLock()
        self.stop = threading.Event()
        reg = store.registry
        self.k_pod, self.k_deploy = reg.get("", "v1", "pods"), reg.get("apps", "v1", "deployments")
        self.k_sts, self.k_secret = reg.get("apps", "v1", "statefulsets"), reg.get("", "v1", "secrets")
        self.k_cm, self.k_crd = reg.get("", "v1", "configmaps"), reg.get("apiextensions.k8s.io", "v1",
                                                                        "customresourcedefinitions")

    # --- main loop -------------------------------------------------------------------------------

    def run(self) -> None:
        while not self.stop.is_set():
            for step in (self.store.collect_garbage, self.sync_crds, self.network.sync_services,
                         self.sync_deployments, self.sync_statefulsets, self.sync_pods):
                try:
                    step()
                except ApiError:
                    pass  # a conflict with a concurrent write: the next pass retries
                except Exception as e:  # keep the control loop alive; report why
                    print(f"standin: {step.__name__}: {type(e).__name__}: {e}", flush=True)
            self.stop.wait(0.3)

    def shutdown(self) -> None:
        self.stop.set()
        with self.lock:
            for pod in self.pods.values():
                for c in pod.containers.values():
                    if c.proc and c.proc.poll() is None:
                        _signal(c.proc, signal.SIGKILL)

    def sync_crds(self) -> None:
        crds, _ = self.store.list(self.k_crd, None)
        for crd in crds:
            self.store.registry.add_crd(crd)
            conds = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" for c in conds):
                status = {"conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "lastTransitionTime": now()},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                     "lastTransitionTime": now()}], "acceptedNames": crd["spec"]["names"],
                    "storedVersions": [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]}
                self.store.patch(self.k_crd, None, crd["metadata"]["name"], "merge", {"status": status},
                                 subresource="status")

    # --- workload controllers --------------------------------------------------------------------

    def owned_pods(self, owner: dict) -> list:
        pods, _ = self.store.list(self.k_pod, owner["metadata"]["namespace"])
        return [p for p in pods if any(r.get("uid") == owner["metadata"]["uid"]
                                       for r in p["metadata"].get("ownerReferences") or [])]

    def new_pod(self, owner: dict, kind: str, name: str, labels: dict, template: dict) -> dict:
        meta = copy.deepcopy(template.get("metadata") or {})
        meta["labels"] = dict(meta.get("labels") or {}, **labels)
        meta.update(name=name, namespace=owner["metadata"]["namespace"],
                    ownerReferences=[{"apiVersion": "apps/v1", "kind": kind, "name": owner["metadata"]["name"],
                                      "uid": owner["metadata"]["uid"], "controller": True,
                                      "blockOwnerDeletion": True}])
        spec = copy.deepcopy(template.get("spec") or {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec["nodeName"] = "standin"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                "status": {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]}}

    def sync_deployments(self) -> None:
        deployments, _ = self.store.list(self.k_deploy, None)
        for d in deployments:
            pods = self.owned_pods(d)
            spec = d.get("spec") or {}
            h = template_hash(spec.get("template") or {})
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            if not d["metadata"].get("deletionTimestamp"):
                old = [p for p in live if p["metadata"]["labels"].get("pod-template-hash") != h]
                for p in old:
                    self.store.delete(self.k_pod, p["metadata"]["namespace"], p["metadata"]["name"])
                current = [p for p in live if p["metadata"]["labels"].get("pod-template-hash") == h]
                want = spec.get("replicas", 1)
                if not [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") != h]:
                    for _ in range(want - len(current)):  # Recreate: only once the old pods are gone
                        name = f"{d['metadata']['name']}-{h[:9]}-{uuid.uuid4().hex[:5]}"
                        self.store.create(self.k_pod, d["metadata"]["namespace"],
                                          self.new_pod(d, "Deployment", name, {"pod-template-hash": h},
                                                       spec.get("template") or {}))
                for p in sorted(current, key=lambda p: p["metadata"]["name"])[want:]:
                    self.store.delete(self.k_pod, p["metadata"]["namespace"], p["metadata"]["name"])
            pods = [p for p in self.owned_pods(d) if not p["metadata"].get("deletionTimestamp")]
            ready = sum(1 for p in pods if _pod_ready(p))
            updated = sum(1 for p in pods if p["metadata"]["labels"].get("pod-template-hash") == h)
            status = {"observedGeneration": d["metadata"]["generation"], "replicas": len(pods),
                      "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": ready,
                      "unavailableReplicas": max(0, spec.get("replicas", 1) - ready),
                      "conditions": [{"type": "Available", "status": "True" if ready >= spec.get("replicas", 1)
                                      else "False", "reason": "MinimumReplicasAvailable"}]}
            self._set_status(self.k_deploy, d, status)

    def sync_statefulsets(self) -> None:
        sets, _ = self.store.list(self.k_sts, None)
        for s in sets:
            spec = s.get("spec") or {}
            h = template_hash(spec.get("template") or {})
            revision = f"{s['metadata']['name']}-{h}"
            pods = self.owned_pods(s)
            want = spec.get("replicas", 1)
            if not s["metadata"].get("deletionTimestamp"):
                by_name = {p["metadata"]["name"]: p for p in pods}
                for p in pods:
                    if p["metadata"].get("deletionTimestamp"):
                        continue
                    ordinal = int(p["metadata"]["name"].rsplit("-", 1)[1])
                    old_revision = p["metadata"]["labels"].get("controller-revision-hash") != revision
                    if ordinal >= want or old_revision:
                        self.store.delete(self.k_pod, p["metadata"]["namespace"], p["metadata"]["name"])
                for i in range(want):
                    name = f"{s['metadata']['name']}-{i}"
                    if name not in by_name:
                        pod = self.new_pod(s, "StatefulSet", name, {"controller-revision-hash": revision,
                                                                    "statefulset.kubernetes.io/pod-name": name,
                                                                    "apps.kubernetes.io/pod-index": str(i)},
                                           spec.get("template") or {})
                        pod["spec"]["hostname"] = name
                        pod["spec"]["subdomain"] = spec.get("serviceName")
                        self.store.create(self.k_pod, s["metadata"]["namespace"], pod)
            pods = [p for p in self.owned_pods(s) if not p["metadata"].get("deletionTimestamp")]
            ready = sum(1 for p in pods if _pod_ready(p))
            updated = sum(1 for p in pods if p["metadata"]["labels"].get("controller-revision-hash") == revision)
            status = {"observedGeneration": s["metadata"]["generation"], "replicas": len(pods),
                      "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": updated,
                      "updatedReplicas": updated, "currentRevision": revision, "updateRevision": revision}
            self._set_status(self.k_sts, s, status)

    def _set_status(self, kind, obj: dict, status: dict) -> None:
        if {k: v for k, v in (obj.get("status") or {}).items()} == status:
            return
        body = copy.deepcopy(obj)
        body["status"] = status
        body["metadata"].pop("managedFields", None)
        self.store.update(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"], body,
                          subresource="status")

    # --- pods ------------------------------------------------------------------------------------

    def sync_pods(self) -> None:
        pods, _ = self.store.list(self.k_pod, None)
        seen = set()
        for p in pods:
            uid = p["metadata"]["uid"]
            seen.add(uid)
            with self.lock:
                pod = self.pods.get(uid)
                if pod is None:
                    ip = self.network.allocate_pod_ip()
                    directory = os.path.join(self.root, "pods", f"{p['metadata']['namespace']}_{p['metadata']['name']}_{uid[:8]}")
                    os.makedirs(directory, exist_ok=True)
                    pod = self.pods[uid] = Pod(p["metadata"]["namespace"], p["metadata"]["name"], uid, ip, directory)
                    for c in p["spec"].get("containers") or []:
                        pod.containers[c["name"]] = Container(c)
            self.sync_pod(p, pod)
        with self.lock:  # force-deleted pods: the object is gone, kill what still runs
            for uid in [u for u in self.pods if u not in seen]:
                for c in self.pods[uid].containers.values():
                    if c.proc and c.proc.poll() is None:
                        _signal(c.proc, signal.SIGKILL)
                        c.proc.wait()
                del self.pods[uid]

    def sync_pod(self, p: dict, pod: Pod) -> None:
        t = time.monotonic()
        deleting = bool(p["metadata"].get("deletionTimestamp"))
        if deleting:
            grace = p["metadata"].get("deletionGracePeriodSeconds", 30)
            if not pod.term_sent:
                pod.term_sent = t
                for c in pod.containers.values():
                    if c.proc and c.proc.poll() is None:
                        _signal(c.proc, signal.SIGTERM if grace > 0 else signal.SIGKILL)
            for c in pod.containers.values():
                if c.proc and c.proc.poll() is None and t - pod.term_sent >= grace:
                    _signal(c.proc, signal.SIGKILL)
            if all(c.proc is None or c.proc.poll() is not None for c in pod.containers.values()):
                self.store.remove_now(self.k_pod, pod.namespace, pod.name)
            return
        restart = (p["spec"].get("restartPolicy") or "Always")
        for c in pod.containers.values():
            if c.proc is not None and c.proc.poll() is not None:
                code = c.proc.returncode
                code = 128 - code if code < 0 else code
                c.last_exit = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                               "startedAt": c.started_text, "finishedAt": now()}
                if c.killing_for_liveness:
                    c.last_exit["reason"] = "Error"
                c.proc, c.ready = None, False
                c.ready_successes = c.ready_failures = c.live_failures = 0
                if restart == "Always" or (restart == "OnFailure" and code != 0):
                    c.restarts += 1
                    c.backoff = BACKOFF_START if t - c.started_at > 600 else c.backoff
                    c.next_start = t + c.backoff
                    c.backoff = min(c.backoff * 2, BACKOFF_MAX)
                    c.waiting_reason = "CrashLoopBackOff"
                    c.waiting_message = f"back-off {int(c.next_start - t)}s restarting failed container={c.name} pod={pod.name}"
                else:
                    pod.finished = True
            if c.proc is None and not pod.finished and t >= c.next_start:
                self.start(p, pod, c)
            if c.proc is not None:
                self.probe(p, pod, c, t)
        self.report(p, pod)

    def start(self, p: dict, pod: Pod, c: Container) -> None:
        try:
            argv, env, cwd = self.command_line(p, pod, c.spec)
        except LaunchError as e:
            if c.waiting_message != str(e):
                print(f"standin: pod {pod.namespace}/{pod.name}: {e.reason}: {e}", flush=True)
            c.waiting_reason, c.waiting_message = e.reason, str(e)
            c.next_start = time.monotonic() + 2
            return
        logs = os.path.join(pod.dir, "logs")
        os.makedirs(logs, exist_ok=True)
        out = open(os.path.join(logs, f"{c.name}-{c.restarts}.log"), "ab")
        try:
            c.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as e:
            c.waiting_reason, c.waiting_message = "RunContainerError", str(e)
            c.next_start = time.monotonic() + c.backoff
            return
        finally:
            out.close()
        c.started_at, c.started_text = time.monotonic(), now()
        c.killing_for_liveness = False
        c.next_probe = c.started_at
        c.waiting_reason = ""

    def command_line(self, p: dict, pod: Pod, spec: dict):
        # Service names are rewritten once, at start: give Services created since this loop's
        # sync their addresses first (cluster DNS would resolve them whenever they exist).
        self.network.sync_services()
        command = list(spec.get("command") or [])
        if not command:
            raise LaunchError("RunContainerError", f"container {spec['name']}: no command (image entrypoints "
                              "are not known to the stand-in)")
        binary = self.binaries.get(os.path.basename(command[0]))
        if binary is None:
            raise LaunchError("RunContainerError", f"container {spec['name']}: no local binary for "
                              f"{command[0]!r} (known: {sorted(self.binaries)})")
        mounts = self.prepare_volumes(p, pod, spec)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOSTNAME": pod.name}
        values: dict = {}
        for e in spec.get("env") or []:
            values[e["name"]] = self.env_value(p, pod, e, values)
        pod_env = {k: self.localize(v, mounts, pod) for k, v in values.items()}
        env.update(pod_env)
        if p["spec"].get("automountServiceAccountToken", True) is not False:
            env["KUBECONFIG"] = self.kubeconfig_for(p)
        if self.proxy_url:
            env["HTTP_PROXY"] = env["http_proxy"] = self.proxy_url
        args = [_expand(a, values) for a in command[1:] + list(spec.get("args") or [])]
        args = [self.localize(a, mounts, pod) for a in args]
        cwd = self.localize(spec.get("workingDir") or "", mounts, pod) or pod.dir
        os.makedirs(cwd, exist_ok=True)
        return [binary] + args, env, cwd

    def localize(self, text: str, mounts: dict, pod: Pod) -> str:
        if mounts:  # one pass: a replacement (a path under /tmp, say) is never rewritten again
            paths = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
            text = re.sub(rf"(?<![\w/])({paths})(?=/|$|[^\w])", lambda m: mounts[m.group(1)], text)
        text = re.sub(r"(?<![\d.])0\.0\.0\.0(?=:)", pod.ip, text)
        return self.network.rewrite(text, pod.namespace)

    def prepare_volumes(self, p: dict, pod: Pod, spec: dict) -> dict:
        volumes = {v["name"]: v for v in p["spec"].get("volumes") or []}
        mounts = {}
        for m in spec.get("volumeMounts") or []:
            v = volumes.get(m["name"])
            if v is None:
                raise LaunchError("CreateContainerConfigError", f"volume {m['name']!r} not found")
            local = os.path.join(pod.dir, "volumes", m["name"])
            os.makedirs(local, exist_ok=True)
            if "configMap" in v or "secret" in v:
                src = v.get("configMap") or v.get("secret")
                kind = self.k_cm if "configMap" in v else self.k_secret
                name = src.get("name") or src.get("secretName")
                obj = self.store.try_get(kind, pod.namespace, name)
                if obj is None:
                    raise LaunchError("CreateContainerConfigError", f'{kind.kind.lower()} "{name}" not found')
                data = dict(obj.get("data") or {})
                if kind is self.k_secret:
                    import base64
                    data = {k: base64.b64decode(val).decode() for k, val in data.items()}
                for key, value in data.items():
                    with open(os.path.join(local, key), "w", encoding="utf-8") as f:
                        f.write(value)
            mounts[m["mountPath"].rstrip("/")] = local
        return mounts

    def env_value(self, p: dict, pod: Pod, e: dict, values: dict) -> str:
        if "value" in e:
            return _expand(str(e["value"]), values)
        src = e.get("valueFrom") or {}
        if "fieldRef" in src:
            field = src["fieldRef"]["fieldPath"]
            if field == "status.podIP":
                return pod.ip
            return str(objects.get_path(p, field.split("."), ""))
        for ref_kind, kind in (("secretKeyRef", self.k_secret), ("configMapKeyRef", self.k_cm)):
            if ref_kind in src:
                ref = src[ref_kind]
                obj = self.store.try_get(kind, pod.namespace, ref["name"])
                data = (obj or {}).get("data") or {}
                if obj is None or ref["key"] not in data:
                    if ref.get("optional"):
                        return ""
                    what = "secret" if kind is self.k_secret else "configmap"
                    raise LaunchError("CreateContainerConfigError",
                                      f'{what} "{ref["name"]}" not found' if obj is None
                                      else f'couldn\'t find key {ref["key"]} in {what} {pod.namespace}/{ref["name"]}')
                if kind is self.k_secret:
                    import base64
                    return base64.b64decode(data[ref["key"]]).decode()
                return data[ref["key"]]
        return ""

    def kubeconfig_for(self, p: dict) -> str:
        sa = p["spec"].get("serviceAccountName") or "default"
        token = self.tokens.service_account(p["metadata"]["namespace"], sa)
        path = os.path.join(self.root, "kubeconfigs", f"{p['metadata']['namespace']}_{sa}.yaml")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_kubeconfig(path, self.api_url, token, p["metadata"]["namespace"], self.ca_file)
        return path

    def probe(self, p: dict, pod: Pod, c: Container, t: float) -> None:
        if t < c.next_probe:
            return
        c.next_probe = t + 1.0
        age = t - c.started_at
        for which in ("readinessProbe", "livenessProbe"):
            probe = c.spec.get(which)
            if which == "readinessProbe" and not probe:
                c.ready = True
                continue
            if not probe or age < probe.get("initialDelaySeconds", 0):
                continue
            key = f"_last_{which}"
            if t - getattr(c, key, 0.0) < probe.get("periodSeconds", 10):
                continue
            setattr(c, key, t)
            ok = self.run_probe(pod, c, probe)
            if which == "readinessProbe":
                if ok:
                    c.ready_failures = 0
                    c.ready_successes += 1
                    if c.ready_successes >= probe.get("successThreshold", 1):
                        c.ready = True
                else:
                    c.ready_successes = 0
                    c.ready_failures += 1
                    if c.ready_failures >= probe.get("failureThreshold", 3):
                        c.ready = False
            else:
                c.live_failures = 0 if ok else c.live_failures + 1
                if c.live_failures >= probe.get("failureThreshold", 3) and not c.killing_for_liveness:
                    c.killing_for_liveness = True
                    _signal(c.proc, signal.SIGTERM)
                    grace = p["spec"].get("terminationGracePeriodSeconds", 30)
                    threading.Timer(grace, _signal, args=(c.proc, signal.SIGKILL)).start()

    def run_probe(self, pod: Pod, c: Container, probe: dict) -> bool:
        timeout = probe.get("timeoutSeconds", 1)
        pseudo = {"spec": {"containers": [c.spec]}}
        from network import container_port
        if "httpGet" in probe:
            g = probe["httpGet"]
            url = f"http://{pod.ip}:{container_port(pseudo, g['port'])}{g.get('path', '/')}"
            try:
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(url, timeout=timeout) as r:
                    return 200 <= r.status < 400
            except Exception:
                return False
        if "tcpSocket" in probe:
            import socket
            try:
                socket.create_connection((pod.ip, container_port(pseudo, probe["tcpSocket"]["port"])), timeout).close()
                return True
            except OSError:
                return False
        return True

    def report(self, p: dict, pod: Pod) -> None:
        statuses = []
        for c in pod.containers.values():
            st = {"name": c.name, "ready": c.ready, "restartCount": c.restarts, "image": c.spec.get("image", ""),
                  "imageID": "", "started": c.proc is not None}
            if c.proc is not None:
                st["state"] = {"running": {"startedAt": c.started_text}}
            elif pod.finished and c.last_exit:
                st["state"] = {"terminated": c.last_exit}
            else:
                st["state"] = {"waiting": {"reason": c.waiting_reason or "ContainerCreating",
                                           **({"message": c.waiting_message} if c.waiting_message else {})}}
            if c.last_exit:
                st["lastState"] = {"terminated": c.last_exit}
            statuses.append(st)
        all_ready = bool(statuses) and all(s["ready"] for s in statuses)
        running = any(c.proc is not None for c in pod.containers.values())
        phase = "Running" if running or any(c.restarts for c in pod.containers.values()) else "Pending"
        if pod.finished:
            phase = "Succeeded" if all((c.last_exit or {}).get("exitCode") == 0 for c in pod.containers.values()) \
                else "Failed"
        old = p.get("status") or {}
        old_conds = {c["type"]: c for c in old.get("conditions") or []}

        def cond(kind: str, ok: bool) -> dict:
            value = "True" if ok else "False"
            prev = old_conds.get(kind)
            stamp = prev["lastTransitionTime"] if prev and prev["status"] == value else now()
            return {"type": kind, "status": value, "lastTransitionTime": stamp}

        status = {"phase": phase, "hostIP": "127.0.0.1", "podIP": pod.ip, "podIPs": [{"ip": pod.ip}],
                  "startTime": old.get("startTime") or now(),
                  "conditions": [cond("PodScheduled", True), cond("Initialized", True),
                                 cond("ContainersReady", all_ready), cond("Ready", all_ready)],
                  "containerStatuses": statuses}
        if status != old:
            body = copy.deepcopy(p)
            body["status"] = status
            body["metadata"].pop("managedFields", None)
            try:
                self.store.update(self.k_pod, pod.namespace, pod.name, body, subresource="status")
            except ApiError:
                pass

    def pod_log(self, namespace: str, name: str, container: str | None, previous: bool) -> str | None:
        with self.lock:
            pod = next((x for x in self.pods.values() if x.namespace == namespace and x.name == name), None)
            if pod is None:
                return ""
            c = pod.containers.get(container) if container else next(iter(pod.containers.values()), None)
            if c is None:
                return ""
            # The current instance is the newest one started (in back-off: the one that exited),
            # the previous one the instance before it, as the kubelet keeps them.
            logs = os.path.join(pod.dir, "logs")
            indices = sorted(int(f.rsplit("-", 1)[1][:-4]) for f in os.listdir(logs)
                             if f.startswith(f"{c.name}-") and f.endswith(".log")) if os.path.isdir(logs) else []
            if len(indices) < (2 if previous else 1):
                return None if previous else ""
            path = os.path.join(logs, f"{c.name}-{indices[-2] if previous else indices[-1]}.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return None if previous else ""


class LaunchError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _expand(text: str, values: dict) -> str:
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: values.get(m.group(1), m.group(0)), text)


def _signal(proc, sig) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pod_ready(p: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (p.get("status") or {}).get("conditions") or [])


def write_kubeconfig(path: str, server: str, token: str, namespace: str = "default", ca_file: str = "") -> None:
    cluster = {"server": server}
    if ca_file:
        cluster["certificate-authority"] = ca_file
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "standin",
              "clusters": [{"name": "standin", "cluster": cluster}],
              "users": [{"name": "standin", "user": {"token": token}}],
              "contexts": [{"name": "standin", "context": {"cluster": "standin", "user": "standin",
                                                           "namespace": namespace}}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
