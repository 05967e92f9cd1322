"""The cluster network on loopback.

- Every pod gets its own loopback address (127.77.x.y; all of 127.0.0.0/8 reaches `lo` on
  Linux), so container ports need no remapping: two pods both listen on 8081 at their own IPs.
- Every ClusterIP Service gets a stable loopback address (127.78.x.y) with a TCP proxy per port
  forwarding to a ready endpoint (a pod its selector matches), as kube-proxy does.
- DNS: processes get Service names rewritten to those addresses in their arguments and
  environment (`svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`); names built at run
  time go through the HTTP forward proxy of the API server (HTTP_PROXY), which resolves them.
"""

from __future__ import annotations

import random
import re
import socket
import threading

import objects


class Network:
    def __init__(self, store) -> None:
        self.store = store
        self.lock = threading.Lock()
        # A random start, so two stand-ins on one machine do not hand out the same addresses.
        self.next_pod = random.randrange(10, 50000)
        self.next_service = random.randrange(10, 50000)
        self.cluster_ips: dict = {}  # (ns, name) -> ip
        self.proxies: dict = {}  # (ip, port) -> listening socket

    def allocate_pod_ip(self) -> str:
        with self.lock:
            n = self.next_pod
            self.next_pod += 1
        return f"127.77.{n // 250 % 250}.{n % 250 + 2}"

    def allocate_service_ip(self) -> str:
        with self.lock:
            n = self.next_service
            self.next_service += 1
        return f"127.78.{n // 250 % 250}.{n % 250 + 2}"

    # --- services --------------------------------------------------------------------------------

    def sync_services(self) -> None:
        """Gives new ClusterIP Services an address and starts their port proxies."""
        kind = self.store.registry.get("", "v1", "services")
        services, _ = self.store.list(kind, None)
        for svc in services:
            meta, spec = svc["metadata"], svc.get("spec") or {}
            key = (meta["namespace"], meta["name"])
            if spec.get("clusterIP") == "None":
                continue
            if not spec.get("clusterIP"):
                ip = self.allocate_service_ip()
                updated = dict(svc, spec=dict(spec, clusterIP=ip, clusterIPs=[ip]))
                updated["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
                try:
                    svc = self.store.update(kind, meta["namespace"], meta["name"], updated, check_rv=True)
                except Exception:
                    continue
                spec = svc["spec"]
            self.cluster_ips[key] = spec["clusterIP"]
            for port in spec.get("ports") or []:
                self._ensure_proxy(spec["clusterIP"], port["port"], meta["namespace"], meta["name"], port)

    def _ensure_proxy(self, ip: str, port: int, namespace: str, name: str, port_spec: dict) -> None:
        if (ip, port) in self.proxies:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((ip, port))
        listener.listen(64)
        self.proxies[(ip, port)] = listener
        threading.Thread(target=self._accept, args=(listener, namespace, name, port_spec), daemon=True).start()

    def _accept(self, listener, namespace: str, name: str, port_spec: dict) -> None:
        while True:
            try:
                client, peer = listener.accept()
            except OSError:
                return
            target = self.endpoint(namespace, name, port_spec)
            if target is None:
                client.close()  # no ready endpoint: connection refused, as with kube-proxy
                continue
            try:
                # From the client's own address, as kube-proxy's DNAT keeps the source IP.
                upstream = socket.create_connection(target, timeout=5, source_address=(peer[0], 0))
                upstream.settimeout(None)
                for s in (client, upstream):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def endpoint(self, namespace: str, name: str, port_spec: dict):
        """(pod IP, container port) of a ready pod behind Service `name`, or None."""
        svc = self.store.try_get(self.store.registry.get("", "v1", "services"), namespace, name)
        if svc is None:
            return None
        spec = svc.get("spec") or {}
        backend = (svc["metadata"].get("annotations") or {}).get("standin.weir.dev/backend")
        if backend:
            host, _, port = backend.rpartition(":")
            return host, int(port)
        selector = objects.selector_from_match_labels(spec.get("selector") or {})
        if not selector:
            return None
        pods, _ = self.store.list(self.store.registry.get("", "v1", "pods"), namespace)
        not_ready_ok = spec.get("publishNotReadyAddresses", False)
        for pod in pods:
            if not objects.labels_match(selector, pod["metadata"].get("labels")):
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            status = pod.get("status") or {}
            ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
            if not status.get("podIP") or not (ready or not_ready_ok):
                continue
            return status["podIP"], container_port(pod, port_spec.get("targetPort", port_spec["port"]))
        return None

    def resolve_service(self, namespace: str, name: str, port) -> tuple | None:
        """The (address, port) a client reaching Service `name` on `port` connects to."""
        svc = self.store.try_get(self.store.registry.get("", "v1", "services"), namespace, name)
        if svc is None:
            return None
        for p in (svc.get("spec") or {}).get("ports") or []:
            if port in ("", None) or p["port"] == port or p.get("name") == port:
                return self.endpoint(namespace, name, p)
        return None

    def resolve_host(self, host: str, port: int) -> tuple | None:
        """A Service DNS name (`svc.ns[.svc[.cluster.local]]`) and port to a pod endpoint."""
        parts = host.split(".")
        if len(parts) >= 2 and (len(parts) == 2 or parts[2] == "svc"):
            return self.resolve_service(parts[1], parts[0], port)
        return None

    def rewrite(self, text: str, namespace: str) -> str:
        """Replaces Service DNS names in `text` with their loopback cluster addresses."""
        for (ns, name), ip in sorted(self.cluster_ips.items(), key=lambda kv: -len(kv[0][1])):
            names = [f"{name}.{ns}.svc.cluster.local", f"{name}.{ns}.svc", f"{name}.{ns}"]
            if ns == namespace:
                names.append(name)
            for n in names:
                text = re.sub(rf"(?<![\w.-]){re.escape(n)}(?![\w-]|\.[a-z])", ip, text)
        return text


def container_port(pod: dict, target) -> int:
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == target:
                return p["containerPort"]
    return -1


def _pump(src, dst) -> None:
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            src.close()
        except OSError:
            pass
