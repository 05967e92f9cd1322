#!/usr/bin/env python3
"""Assertions on `helm template` output of charts/weir-operator (run by hack/chart-test.sh).

Each case renders the chart with some values and checks what a cluster admin reviewing the chart
would check: RBAC scope follows watchNamespaces, leader-election RBAC only when it runs, no
privileged pod settings, every RBAC rule commented, runtime defaults passed to the operator, and
values.schema.json rejecting bad values. Needs PyYAML (installed with kubernetes-validate).

Every rendering is also handed to the real operator binary (WEIR_OPERATOR_BIN, built by
hack/chart-test.sh): `weir-operator <rendered args> --check-args` with the rendered environment
must parse, and what it resolves to must agree with the chart (leader election on exactly when
the Lease Role is rendered, the log filter, the runtime image and defaults, the Lease namespace).
"""

import json
import os
import re
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "charts", "weir-operator")
HELM = os.environ.get("HELM", "helm")
OPERATOR_BIN = os.environ.get("WEIR_OPERATOR_BIN", os.path.join(ROOT, "target", "debug", "weir-operator"))
RELEASE, NAMESPACE = "weir-operator", "weir-system"
FAKE_POD_NAME = "weir-operator-5d8f7c9b4-x2x7q"

passed = 0
failures = []


def render(*sets, include_crds=False):
    cmd = [HELM, "template", RELEASE, CHART, "--namespace", NAMESPACE]
    if include_crds:
        cmd.append("--include-crds")
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    check_operator_accepts(" ".join(sets) or "(default values)", docs)
    return out, docs


def pod_env(container):
    """The container's environment as the kubelet would set it (fieldRefs of this pod resolved)."""
    fields = {"metadata.name": FAKE_POD_NAME, "metadata.namespace": NAMESPACE}
    out = {}
    for e in container.get("env", []):
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif "fieldRef" in e.get("valueFrom", {}):
            out[e["name"]] = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return out


def check_operator_accepts(case, docs):
    """The real binary parses the rendered command line and environment, and agrees with the chart."""
    deployments = kinds(docs, "Deployment")
    if not deployments:
        return
    c = deployments[0]["spec"]["template"]["spec"]["containers"][0]
    env_vars = pod_env(c)
    # Only the rendered environment (plus PATH): nothing from this shell leaks into the parse.
    proc_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env_vars}
    cmd = [OPERATOR_BIN] + c["args"] + ["--check-args"]
    if not os.access(OPERATOR_BIN, os.X_OK):
        check(f"{case}: operator binary {OPERATOR_BIN} exists (cargo build -p weir-operator)", False)
        return
    r = subprocess.run(cmd, capture_output=True, text=True, env=proc_env)
    where = f"{case}: weir-operator {' '.join(c['args'])}"
    check(f"{where}: the operator binary accepts the rendered args and env", r.returncode == 0,
          (r.stderr or r.stdout).strip()[:400])
    if r.returncode != 0:
        return
    got = json.loads(r.stdout)
    lease_rule = any("leases" in r["resources"] for _, r in all_rules(docs))
    rbac_rendered = any(d["kind"] in ("ClusterRole", "Role") for d in docs)
    if rbac_rendered:
        check(f"{where}: leader election on exactly when the Lease Role is rendered",
              got["leaderElection"] == lease_rule, (got["leaderElection"], lease_rule))
    multi = deployments[0]["spec"]["replicas"] > 1
    check(f"{where}: more than one replica implies leader election", got["leaderElection"] or not multi)
    check(f"{where}: Lease in the release namespace", got["leaseNamespace"] == NAMESPACE, got["leaseNamespace"])
    check(f"{where}: Lease identity is the pod name", got["identity"] == FAKE_POD_NAME, got["identity"])
    check(f"{where}: log filter is operator.logLevel (WEIR_LOG)",
          got["logFilter"] == env_vars.get("WEIR_LOG"), (got["logFilter"], env_vars.get("WEIR_LOG")))
    check(f"{where}: log format", got["logFormat"] == env_vars.get("WEIR_LOG_FORMAT"), got["logFormat"])
    check(f"{where}: runtime image", got["runtimeImage"] == env_vars.get("WEIR_RUNTIME_IMAGE"), got["runtimeImage"])
    if "WEIR_RUNTIME_DEFAULTS" in env_vars:
        want = json.loads(env_vars["WEIR_RUNTIME_DEFAULTS"])
        check(f"{where}: the operator reads every runtime default the chart passes (WEIR_RUNTIME_DEFAULTS)",
              got["runtimeDefaults"] == want, (got["runtimeDefaults"], want))
    if "WEIR_NETWORK_POLICIES" in env_vars:
        want = json.loads(env_vars["WEIR_NETWORK_POLICIES"])
        check(f"{where}: the operator reads the NetworkPolicy settings the chart passes (WEIR_NETWORK_POLICIES)",
              got["networkPolicies"] == want, (got["networkPolicies"], want))
    port = next(p["containerPort"] for p in c["ports"] if p["name"] == "metrics")
    check(f"{where}: metrics address on the metrics port", got["metricsAddr"].endswith(f":{port}"), got["metricsAddr"])


def render_fails(*sets):
    cmd = [HELM, "template", RELEASE, CHART, "--namespace", NAMESPACE]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode != 0, r.stderr


def check(name, cond, detail=""):
    global passed
    if cond:
        passed += 1
    else:
        failures.append(f"{name}: {detail}" if detail else name)


def kinds(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def deployment(docs):
    (d,) = kinds(docs, "Deployment")
    return d


def operator_container(docs):
    return deployment(docs)["spec"]["template"]["spec"]["containers"][0]


def env(docs):
    return {e["name"]: e.get("value") for e in operator_container(docs)["env"]}


def all_rules(docs):
    for d in docs:
        if d["kind"] in ("ClusterRole", "Role"):
            for r in d.get("rules", []):
                yield d, r


def check_no_privileged(case, docs):
    for d in docs:
        if d["kind"] not in ("Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"):
            continue
        pod = d["spec"]["template"]["spec"]
        where = f"{case}: {d['kind']}/{d['metadata']['name']}"
        for k in ("hostNetwork", "hostPID", "hostIPC"):
            check(f"{where} {k} unset", not pod.get(k), f"{k}={pod.get(k)}")
        psc = pod.get("securityContext", {})
        check(f"{where} pod runAsNonRoot", psc.get("runAsNonRoot") is True)
        check(f"{where} pod runAsUser non-root", psc.get("runAsUser", 1) != 0)
        check(
            f"{where} pod seccomp RuntimeDefault",
            psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
        )
        for v in pod.get("volumes", []):
            check(f"{where} no hostPath volume", "hostPath" not in v, v.get("name"))
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            sc = c.get("securityContext", {})
            cw = f"{where} container {c['name']}"
            check(f"{cw} not privileged", sc.get("privileged") is not True)
            check(f"{cw} allowPrivilegeEscalation false", sc.get("allowPrivilegeEscalation") is False)
            check(f"{cw} readOnlyRootFilesystem", sc.get("readOnlyRootFilesystem") is True)
            caps = sc.get("capabilities", {})
            check(f"{cw} drops ALL capabilities", "ALL" in caps.get("drop", []))
            check(f"{cw} adds no capabilities", not caps.get("add"), caps.get("add"))
            check(f"{cw} has resources", bool(c.get("resources", {}).get("requests")))
            check(f"{cw} has liveness probe", "livenessProbe" in c)
            check(f"{cw} has readiness probe", "readinessProbe" in c)
            for p in c.get("ports", []):
                check(f"{cw} no hostPort", "hostPort" not in p)


def check_rbac_hygiene(case, docs):
    for d, r in all_rules(docs):
        where = f"{case}: {d['kind']}/{d['metadata']['name']}"
        for field in ("apiGroups", "resources", "verbs"):
            check(f"{where} no wildcard {field}", "*" not in r.get(field, []), r)
        check(
            f"{where} no escalate/bind/impersonate",
            not {"escalate", "bind", "impersonate"} & set(r["verbs"]),
            r,
        )
        check(
            f"{where} nothing cluster-level",
            not {"nodes", "namespaces", "clusterroles", "clusterrolebindings",
                 "customresourcedefinitions", "roles", "rolebindings"} & set(r["resources"]),
            r,
        )
        if "secrets" in r["resources"]:
            check(f"{where} secrets: get, create, patch only (job secrets; no list/watch)",
                  r["verbs"] == ["get", "create", "patch"], r)
        if "pods" in r["resources"]:
            check(f"{where} pods: read only", set(r["verbs"]) <= {"get", "list", "watch"}, r)


def check_rules_commented(case, text):
    """Every rule in a rendered ClusterRole/Role is directly preceded by a comment line."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*- apiGroups:", line):
            prev = lines[i - 1].strip() if i else ""
            check(f"{case}: rule at line {i + 1} has a comment", prev.startswith("#"), line.strip())


# --- default values: all namespaces, one replica -----------------------------------------------
text, docs = render()
check("default renders ClusterRole", len(kinds(docs, "ClusterRole")) == 1)
check("default renders ClusterRoleBinding", len(kinds(docs, "ClusterRoleBinding")) == 1)
crb = kinds(docs, "ClusterRoleBinding")[0]
check(
    "ClusterRoleBinding binds the operator ServiceAccount",
    crb["subjects"] == [{"kind": "ServiceAccount", "name": "weir-operator", "namespace": NAMESPACE}],
    crb["subjects"],
)
check("default has no Role", not kinds(docs, "Role"), [r["metadata"]["name"] for r in kinds(docs, "Role")])
check("default has no lease rule", not any("leases" in r["resources"] for _, r in all_rules(docs)))
args = operator_container(docs)["args"]
check("default args: run", args[0] == "run", args)
check("default args: watch all namespaces", "--watch-namespaces=" in args, args)
check("default args: no leader election", "--leader-election" not in args, args)
check("default strategy Recreate (no two active operators)",
      deployment(docs)["spec"]["strategy"]["type"] == "Recreate")
check("default: no ServiceMonitor", not kinds(docs, "ServiceMonitor"))
check("default: metrics Service", [s["metadata"]["name"] for s in kinds(docs, "Service")] == ["weir-operator-metrics"])
svc = kinds(docs, "Service")[0]
check("metrics Service selects the operator pods",
      svc["spec"]["selector"].items() <= deployment(docs)["spec"]["template"]["metadata"]["labels"].items())
e = env(docs)
check("WEIR_RUNTIME_IMAGE defaults to the operator image",
      e.get("WEIR_RUNTIME_IMAGE") == operator_container(docs)["image"], e.get("WEIR_RUNTIME_IMAGE"))
defaults = json.loads(e["WEIR_RUNTIME_DEFAULTS"])
check("WEIR_RUNTIME_DEFAULTS has image, resources, security contexts",
      {"image", "imagePullPolicy", "coordinatorResources", "workerResources",
       "podSecurityContext", "containerSecurityContext"} <= defaults.keys(), sorted(defaults))
check("runtime container securityContext is restricted",
      defaults["containerSecurityContext"].get("readOnlyRootFilesystem") is True
      and "ALL" in defaults["containerSecurityContext"]["capabilities"]["drop"])
check("runtime pods run as non-root", defaults["podSecurityContext"].get("runAsNonRoot") is True)
for d in docs:
    if d["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
        check(f"{d['kind']}/{d['metadata']['name']} in release namespace",
              d["metadata"].get("namespace") == NAMESPACE, d["metadata"].get("namespace"))
check_no_privileged("default", docs)
check_rbac_hygiene("default", docs)
check_rules_commented("default", text)

# --- NetworkPolicies: the operator pod's own, and the settings of the per-job ones --------------
def netpol_rules(docs):
    return [r for _, r in all_rules(docs) if "networkpolicies" in r["resources"]]


nps = kinds(docs, "NetworkPolicy")
check("default: one NetworkPolicy (the operator pod's)", len(nps) == 1, [n["metadata"]["name"] for n in nps])
pod_labels = deployment(docs)["spec"]["template"]["metadata"]["labels"]
if nps:
    np_spec = nps[0]["spec"]
    check("operator NetworkPolicy selects the operator pods",
          np_spec["podSelector"]["matchLabels"].items() <= pod_labels.items(), np_spec["podSelector"])
    check("operator NetworkPolicy restricts ingress and egress",
          sorted(np_spec["policyTypes"]) == ["Egress", "Ingress"], np_spec["policyTypes"])
    ingress_ports = [p["port"] for r in np_spec["ingress"] for p in r["ports"]]
    check("operator ingress: only the metrics port", ingress_ports == [8080], ingress_ports)
    check("operator ingress: from the monitoring namespace",
          np_spec["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {
              "kubernetes.io/metadata.name": "monitoring"}}}], np_spec["ingress"][0]["from"])
    egress_ports = sorted({(p.get("protocol"), p["port"]) for r in np_spec["egress"] for p in r["ports"]})
    check("operator egress: API server, DNS, coordinators' control port",
          egress_ports == [("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 8081), ("UDP", 53)], egress_ports)
settings = json.loads(env(docs)["WEIR_NETWORK_POLICIES"])
check("WEIR_NETWORK_POLICIES: enabled, the release namespace, the operator's own pod labels",
      settings["enabled"] is True and settings["operatorNamespace"] == NAMESPACE
      and settings["operatorPodLabels"] and settings["operatorPodLabels"].items() <= pod_labels.items(), settings)
check("default: networkpolicies create/patch granted",
      [r["verbs"] for r in netpol_rules(docs)] == [["create", "patch"]], netpol_rules(docs))
_, off = render("networkPolicies.enabled=false")
check("networkPolicies.enabled=false: no NetworkPolicy", not kinds(off, "NetworkPolicy"))
check("networkPolicies.enabled=false: no networkpolicies rule", not netpol_rules(off))
check("networkPolicies.enabled=false: the operator renders none",
      json.loads(env(off)["WEIR_NETWORK_POLICIES"])["enabled"] is False)
_, closed = render("networkPolicies.monitoringNamespaceSelector=null", "watchNamespaces={team-a}")
closed_np = kinds(closed, "NetworkPolicy")[0]["spec"]
check("monitoringNamespaceSelector=null: no ingress to the operator pod", closed_np["ingress"] == [], closed_np["ingress"])
check("monitoringNamespaceSelector=null reaches the operator as null",
      json.loads(env(closed)["WEIR_NETWORK_POLICIES"])["monitoringNamespaceSelector"] is None)
coordinator_egress = [r for r in closed_np["egress"] if any(p["port"] == 8081 for p in r["ports"])][0]
check("watchNamespaces: coordinator egress only into the watched namespaces",
      coordinator_egress["to"][0]["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a"], coordinator_egress)
for case, value_sets in (("default", []), ("networkPolicies off", ["networkPolicies.enabled=false"]),
                         ("no monitoring", ["networkPolicies.monitoringNamespaceSelector=null"])):
    check_operator_accepts(f"networkPolicies: {case}", render(*value_sets)[1])
_, every = render()
check("RBAC: no update verb on job children or custom resources (server-side apply only)",
      not [r for _, r in all_rules(every) if "update" in r["verbs"] and r["resources"] != ["streamjobs/finalizers"]])

# --- watchNamespaces narrows RBAC to the listed namespaces ---------------------------------------
text, docs = render("watchNamespaces={team-a,team-b}")
check("namespaced: no ClusterRole", not kinds(docs, "ClusterRole"))
check("namespaced: no ClusterRoleBinding", not kinds(docs, "ClusterRoleBinding"))
roles = sorted(r["metadata"]["namespace"] for r in kinds(docs, "Role"))
check("namespaced: one Role per listed namespace", roles == ["team-a", "team-b"], roles)
rbs = kinds(docs, "RoleBinding")
check("namespaced: one RoleBinding per listed namespace",
      sorted(b["metadata"]["namespace"] for b in rbs) == ["team-a", "team-b"])
for b in rbs:
    check(f"RoleBinding in {b['metadata']['namespace']} binds the operator SA from the release namespace",
          b["subjects"] == [{"kind": "ServiceAccount", "name": "weir-operator", "namespace": NAMESPACE}]
          and b["roleRef"]["kind"] == "Role", b)
check("namespaced args", "--watch-namespaces=team-a,team-b" in operator_container(docs)["args"])
check_no_privileged("namespaced", docs)
check_rbac_hygiene("namespaced", docs)
check_rules_commented("namespaced", text)

# --- leader election: RBAC and flag only when it runs --------------------------------------------
for case, sets in (("replicas=2", ["replicas=2"]),
                   ("leaderElection.enabled", ["leaderElection.enabled=true"]),
                   ("replicas=3 namespaced", ["replicas=3", "watchNamespaces={team-a}"])):
    text, docs = render(*sets)
    lease_roles = [d for d, r in all_rules(docs) if "leases" in r["resources"]]
    check(f"{case}: one lease Role", len(lease_roles) == 1 and lease_roles[0]["kind"] == "Role",
          [(d["kind"], d["metadata"]["name"]) for d in lease_roles])
    if lease_roles:
        check(f"{case}: lease Role in the release namespace", lease_roles[0]["metadata"]["namespace"] == NAMESPACE)
        check(f"{case}: lease Role only grants leases",
              all(r["resources"] == ["leases"] for r in lease_roles[0]["rules"]))
    check(f"{case}: lease RoleBinding",
          any(b["roleRef"]["name"].endswith("-leader-election") for b in kinds(docs, "RoleBinding")))
    check(f"{case}: --leader-election", "--leader-election" in operator_container(docs)["args"])
    check(f"{case}: RollingUpdate", deployment(docs)["spec"]["strategy"]["type"] == "RollingUpdate")
    check_rules_commented(case, text)
_, docs = render("replicas=1", "leaderElection.enabled=false")
check("replicas=1: no lease rule", not any("leases" in r["resources"] for _, r in all_rules(docs)))

# --- operator process settings reach the binary --------------------------------------------------
_, docs = render("operator.logLevel=debug\\,kube=info", "operator.logFormat=text",
                 "operator.extraArgs={--lease-seconds=30}")
check("operator.logLevel rendered into WEIR_LOG", env(docs).get("WEIR_LOG") == "debug,kube=info", env(docs).get("WEIR_LOG"))

# --- toggles ------------------------------------------------------------------------------------
failed, err = render_fails("rbac.readS3CredentialsSecrets=false")
check("rbac.readS3CredentialsSecrets is gone (job secrets need the secrets rule): the schema refuses it",
      failed and "readS3CredentialsSecrets" in err, err)
_, docs = render("rbac.create=false")
check("rbac.create=false renders no RBAC",
      not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")])
_, docs = render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")
sm = kinds(docs, "ServiceMonitor")
check("serviceMonitor.enabled renders one ServiceMonitor", len(sm) == 1)
if sm:
    check("ServiceMonitor scrapes the metrics port", sm[0]["spec"]["endpoints"][0]["port"] == "metrics")
    check("ServiceMonitor carries extra labels", sm[0]["metadata"]["labels"].get("release") == "prom")
# Monitoring of job pods (issue 14): off by default; the PodMonitor selects the operator's job pod
# labels (operator/tests/references.rs checks them against the code) on port http, keeping the
# metrics' job label; the dashboard ConfigMap carries the chart's dashboard JSON.
_, docs = render()
check("default: no PodMonitor, no dashboard ConfigMap",
      not kinds(docs, "PodMonitor") and not [d for d in kinds(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]])
_, docs = render("monitoring.podMonitor.enabled=true", "monitoring.podMonitor.labels.release=prom",
                 "monitoring.grafanaDashboard.enabled=true")
pm = kinds(docs, "PodMonitor")
check("monitoring.podMonitor.enabled renders one PodMonitor", len(pm) == 1)
if pm:
    spec = pm[0]["spec"]
    endpoint = spec["podMetricsEndpoints"][0]
    check("PodMonitor scrapes /metrics on port http with honorLabels",
          endpoint["port"] == "http" and endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True, endpoint)
    check("PodMonitor watches every namespace when watchNamespaces is empty", spec["namespaceSelector"] == {"any": True})
    check("PodMonitor selects coordinator and worker pods only",
          spec["selector"]["matchExpressions"] == [{"key": "app.kubernetes.io/component", "operator": "In",
                                                    "values": ["coordinator", "worker"]}], spec["selector"])
    check("PodMonitor carries extra labels", pm[0]["metadata"]["labels"].get("release") == "prom")
dash = [d for d in kinds(docs, "ConfigMap") if d["metadata"]["labels"].get("grafana_dashboard") == "1"]
check("monitoring.grafanaDashboard.enabled renders the dashboard ConfigMap", len(dash) == 1)
if dash:
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "charts", "weir-operator", "dashboards", "weir.json")) as f:
        check("the ConfigMap holds dashboards/weir.json as is", json.loads(dash[0]["data"]["weir.json"]) == json.load(f))
_, docs = render("monitoring.podMonitor.enabled=true", "watchNamespaces={team-a,team-b}")
pm = kinds(docs, "PodMonitor")
check("PodMonitor watches exactly watchNamespaces",
      bool(pm) and pm[0]["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]})
_, docs = render("image.tag=1.2.3", "runtime.image.tag=1.2.4")
check("runtime.image.tag overrides the runtime image",
      env(docs)["WEIR_RUNTIME_IMAGE"] == "ghcr.io/weir-dev/weir:1.2.4", env(docs)["WEIR_RUNTIME_IMAGE"])
check("image.tag sets the operator image", operator_container(docs)["image"] == "ghcr.io/weir-dev/weir:1.2.3")
digest = "sha256:" + "a" * 64
_, docs = render(f"image.digest={digest}")
check("image.digest pins operator and runtime images",
      operator_container(docs)["image"].endswith("@" + digest)
      and env(docs)["WEIR_RUNTIME_IMAGE"].endswith("@" + digest))
_, docs = render("serviceAccount.create=false", "serviceAccount.name=existing")
check("existing ServiceAccount is used", not kinds(docs, "ServiceAccount")
      and deployment(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "existing")

# --- examples/operator/install.yaml: the chart's objects without helm ------------------------------
with open(os.path.join(ROOT, "examples", "operator", "install.yaml")) as f:
    plain = [d for d in yaml.safe_load_all(f) if d]
check_operator_accepts("examples/operator/install.yaml", plain)
plain_container = deployment(plain)["spec"]["template"]["spec"]["containers"][0]
_, chart_docs = render("replicas=2")
chart_container = operator_container(chart_docs)
check("install.yaml runs the image the Dockerfile and the chart build",
      plain_container["image"].rsplit(":", 1)[0] == chart_container["image"].rsplit(":", 1)[0]
      and plain_container.get("command") == chart_container["command"],
      (plain_container["image"], plain_container.get("command")))


def grants(docs):
    return {(g, res, v) for _, r in all_rules(docs) for g in r["apiGroups"] for res in r["resources"]
            for v in r["verbs"]}


missing = grants(chart_docs) - grants(plain)
check("install.yaml grants every permission the chart grants", not missing, sorted(missing))
extra = grants(plain) - grants(chart_docs)
check("install.yaml grants nothing the chart does not", not extra, sorted(extra))
check_no_privileged("install.yaml", plain)

# --- CRDs ship with the chart (once generated) ---------------------------------------------------
crd_dir = os.path.join(CHART, "crds")
crd_files = sorted(f for f in os.listdir(crd_dir) if f.endswith(".yaml")) if os.path.isdir(crd_dir) else []
if crd_files:
    _, docs = render(include_crds=True)
    names = sorted(d["metadata"]["name"] for d in kinds(docs, "CustomResourceDefinition"))
    check("--include-crds renders both CRDs", names == ["savepoints.weir.dev", "streamjobs.weir.dev"], names)

# --- values.schema.json rejects bad values -------------------------------------------------------
for bad in ("replicas=-1", "replicas=two", "watchNamespaces[0]=Team_A", "image.pullPolicy=Sometimes",
            "securityContext.privileged=true", "securityContext.allowPrivilegeEscalation=true",
            "securityContext.capabilities.add[0]=NET_ADMIN", "podSecurityContext.runAsNonRoot=false",
            "podSecurityContext.runAsUser=0", "operator.logFormat=xml", "resources.limits.memory=lots",
            "runtime.image.pullPolicy=Often", "serviceMonitor.interval=soon", "unknownKey=1",
            "networkPolicies.enabled=maybe", "networkPolicies.apiServer.ports[0]=0",
            "networkPolicies.apiServer.cidrs[0]=everywhere", "networkPolicies.unknown=1",
            "image.digest=latest"):
    failed, err = render_fails(bad)
    check(f"schema rejects {bad}", failed and "schema" in err, err.strip()[:200])
failed, err = render_fails("serviceAccount.create=false")
check("serviceAccount.create=false without a name fails", failed and "serviceAccount.name" in err, err[:200])

for f in failures:
    print(f"FAIL {f}")
print(f"chart-test: {passed} passed, {len(failures)} failed")
sys.exit(1 if failures else 0)
