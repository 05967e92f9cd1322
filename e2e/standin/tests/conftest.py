"""Fixtures: a stand-in API server (no kubelet loop) in a temp dir and a small HTTP client."""

from __future__ import annotations

import json
import os
import ssl
import sys
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import main  # noqa: E402

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


class Client:
    """Minimal Kubernetes REST client over the stand-in's TLS port."""

    def __init__(self, url: str, token: str, ca: str) -> None:
        self.url, self.token = url, token
        self.context = ssl.create_default_context(cafile=ca)

    def request(self, method: str, path: str, body=None, content_type: str = "application/json"):
        """(status code, decoded JSON body)."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self.context, timeout=10) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stream(self, path: str):
        """The watch response object (read JSON lines from it)."""
        req = urllib.request.Request(self.url + path)
        req.add_header("Authorization", f"Bearer {self.token}")
        return urllib.request.urlopen(req, context=self.context, timeout=10)


@pytest.fixture
def cluster(tmp_path):
    server, store, kubelet, url = main.start(str(tmp_path), history=50, run_kubelet=False)
    ca = os.path.join(str(tmp_path), "tls", "ca.crt")
    admin = Client(url, "standin-admin", ca)
    for ns in ("weir-e2e", "weir-system"):
        code, _ = admin.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                             "metadata": {"name": ns}})
        assert code == 201
    import yaml
    for crd in ("streamjobs.weir.dev.yaml", "savepoints.weir.dev.yaml"):
        with open(os.path.join(REPO_ROOT, "crds", crd), encoding="utf-8") as f:
            code, body = admin.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                       yaml.safe_load(f))
        assert code == 201, body
    kubelet.sync_crds()

    class Cluster:
        pass

    c = Cluster()
    c.server, c.store, c.kubelet, c.url, c.admin, c.ca = server, store, kubelet, url, admin, ca
    c.client_for = lambda token: Client(url, token, ca)
    yield c
    server.stopping.set()
    server.shutdown()
    server.proxy.shutdown()


def stream_job(name: str = "wc", parallelism: int = 2, **spec) -> dict:
    """A valid StreamJob manifest (the CRD's required fields) with `spec` overrides."""
    body = {"parallelism": parallelism, "maxParallelism": 128, "upgradeMode": "savepoint",
            "image": "weir:test",
            "checkpointing": {"storage": "s3://weir/checkpoints"},
            "job": {"steps": [{"uid": "lines", "source": {"file": {"path": "/in/*.txt", "format": "text"}}},
                              {"uid": "out", "sink": {"file": {"path": "/out"}}}]}}
    body.update(spec)
    return {"apiVersion": "weir.dev/v1alpha1", "kind": "StreamJob",
            "metadata": {"name": name, "namespace": "weir-e2e"}, "spec": body}


SJ = "/apis/weir.dev/v1alpha1/namespaces/weir-e2e/streamjobs"
CM = "/api/v1/namespaces/weir-e2e/configmaps"
