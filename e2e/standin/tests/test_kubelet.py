"""The process kubelet: a Deployment becomes a local process with the template's command, args
and env rewritten for loopback; deletion is SIGTERM, then removal once the process ended."""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PODS = "/api/v1/namespaces/weir-e2e/pods"


def wait_for(predicate, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not reached")


def test_a_deployment_runs_as_a_process_with_rewritten_args_env_and_volumes(cluster, tmp_path):
    script = tmp_path / "fake-weir"
    script.write_text("#!/bin/sh\necho \"args: $*\"\necho \"secret: $KEY ip: $POD_IP\"\n"
                      "cat \"$2\"\ntrap 'echo got TERM; exit 0' TERM\nwhile true; do sleep 0.1; done\n")
    script.chmod(0o755)
    cluster.kubelet.binaries["weir"] = str(script)
    admin = cluster.admin
    admin.request("POST", "/api/v1/namespaces/weir-e2e/configmaps",
                  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"job.yaml": "steps: []"}})
    admin.request("POST", "/api/v1/namespaces/weir-e2e/secrets",
                  {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3"}, "stringData": {"key": "k1"}})
    admin.request("POST", "/api/v1/namespaces/weir-e2e/services",
                  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "coord"},
                   "spec": {"selector": {"app": "x"}, "ports": [{"port": 16123}]}})
    container = {"name": "weir", "image": "weir:test", "command": ["weir"],
                 "args": ["--job", "/etc/weir/job.yaml", "--listen", "0.0.0.0:8081", "--coordinator", "coord:16123",
                          "--advertise", "$(POD_IP):6124"],
                 "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                         {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s3", "key": "key"}}}],
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/weir"}]}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}},
                           "template": {"metadata": {"labels": {"app": "x"}},
                                        "spec": {"terminationGracePeriodSeconds": 5, "containers": [container],
                                                 "volumes": [{"name": "config", "configMap": {"name": "cfg"}}]}}}}
    assert admin.request("POST", "/apis/apps/v1/namespaces/weir-e2e/deployments", deployment)[0] == 201

    def step():
        cluster.server.network.sync_services()
        cluster.kubelet.sync_deployments()
        cluster.kubelet.sync_pods()

    def running_pod():
        step()
        pods = admin.request("GET", PODS)[1]["items"]
        return pods[0] if pods and pods[0]["status"].get("phase") == "Running" else None

    pod = wait_for(running_pod)
    name, ip = pod["metadata"]["name"], pod["status"]["podIP"]
    assert ip.startswith("127.77.")
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    log = wait_for(lambda: (lambda t: t if "steps: []" in t else None)(
        cluster.kubelet.pod_log("weir-e2e", name, None, False) or ""))
    cluster_ip = admin.request("GET", "/api/v1/namespaces/weir-e2e/services/coord")[1]["spec"]["clusterIP"]
    assert f"--listen {ip}:8081" in log, log
    assert f"--coordinator {cluster_ip}:16123" in log, log
    assert f"--advertise {ip}:6124" in log, log
    assert f"secret: k1 ip: {ip}" in log and "/volumes/config/job.yaml" in log
    assert admin.request("DELETE", f"{PODS}/{name}")[0] == 200

    def replaced():
        step()
        pods = admin.request("GET", PODS)[1]["items"]
        return [p for p in pods if p["metadata"]["name"] != name] and not [p for p in pods
                                                                            if p["metadata"]["name"] == name]

    wait_for(replaced)
    import glob
    [old_log] = glob.glob(os.path.join(cluster.kubelet.root, "pods", f"weir-e2e_{name}_*", "logs", "weir-0.log"))
    with open(old_log, encoding="utf-8") as f:
        assert "got TERM" in f.read(), "deletion sends SIGTERM first"
    cluster.kubelet.shutdown()


def test_mount_paths_are_rewritten_once_even_when_the_pod_directory_is_under_a_mount_path(cluster):
    from kubelet import Pod
    pod = Pod("ns", "p", "uid", "127.77.0.9", "/tmp/x/pods/p")
    mounts = {"/etc/weir": "/tmp/x/pods/p/volumes/config", "/tmp": "/tmp/x/pods/p/volumes/tmp"}
    assert cluster.kubelet.localize("--job /etc/weir/job.yaml", mounts, pod) == \
        "--job /tmp/x/pods/p/volumes/config/job.yaml"
    assert cluster.kubelet.localize("/tmp", mounts, pod) == "/tmp/x/pods/p/volumes/tmp"
    assert cluster.kubelet.localize("0.0.0.0:8081", mounts, pod) == "127.77.0.9:8081"
