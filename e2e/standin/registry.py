"""The kinds the stand-in serves: built-in ones here, custom ones added when their CRD is
created. Each is a `Kind` with its group/version/plural, scope, verbs and subresources."""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


@dataclass
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: list = field(default_factory=list)
    status_subresource: bool = False
    scale: dict | None = None  # {specReplicasPath, statusReplicasPath, labelSelectorPath}
    schema: dict | None = None  # openAPIV3Schema of a custom resource
    categories: list = field(default_factory=list)
    printer_columns: list = field(default_factory=list)  # a CRD's additionalPrinterColumns

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTIN = [
    Kind("", "v1", "namespaces", "Namespace", namespaced=False, short_names=["ns"], status_subresource=True),
    Kind("", "v1", "pods", "Pod", short_names=["po"], status_subresource=True),
    Kind("", "v1", "services", "Service", short_names=["svc"], status_subresource=True),
    Kind("", "v1", "endpoints", "Endpoints", short_names=["ep"]),
    Kind("", "v1", "configmaps", "ConfigMap", short_names=["cm"]),
    Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount", short_names=["sa"]),
    Kind("", "v1", "events", "Event", short_names=["ev"]),
    Kind("apps", "v1", "deployments", "Deployment", short_names=["deploy"], status_subresource=True,
         scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector"}),
    Kind("apps", "v1", "statefulsets", "StatefulSet", short_names=["sts"], status_subresource=True,
         scale={"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector"}),
    Kind("apps", "v1", "replicasets", "ReplicaSet", short_names=["rs"], status_subresource=True),
    Kind("events.k8s.io", "v1", "events", "Event", short_names=["ev"]),
    Kind("coordination.k8s.io", "v1", "leases", "Lease"),
    # Stored and served like any object (the chart's and the operator's per-job policies); the
    # stand-in's loopback network does not enforce them (see docs/operator/standin.md).
    Kind("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short_names=["netpol"]),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False),
    Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False),
    Kind("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
         namespaced=False, short_names=["crd", "crds"], status_subresource=True),
    Kind("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"),
]


class Registry:
    """Kinds by (group, version, plural) and by (apiVersion, kind)."""

    def __init__(self) -> None:
        self.kinds: dict = {}
        for k in BUILTIN:
            self.add(k)

    def add(self, kind: Kind) -> None:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind

    def remove_group_resource(self, group: str, plural: str) -> None:
        for key in [k for k in self.kinds if k[0] == group and k[2] == plural]:
            del self.kinds[key]

    def get(self, group: str, version: str, plural: str) -> Kind | None:
        return self.kinds.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> Kind | None:
        for k in self.kinds.values():
            if k.api_version == api_version and k.kind == kind:
                return k
        return None

    def groups(self) -> dict:
        out: dict = {}
        for k in self.kinds.values():
            out.setdefault(k.group, set()).add(k.version)
        return out

    def add_crd(self, crd: dict) -> list:
        """Registers every served version of a CustomResourceDefinition; returns the kinds."""
        spec = crd["spec"]
        names = spec["names"]
        added = []
        for version in spec.get("versions", []):
            if not version.get("served", True):
                continue
            sub = version.get("subresources") or {}
            kind = Kind(spec["group"], version["name"], names["plural"], names["kind"],
                        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                        short_names=names.get("shortNames", []), status_subresource="status" in sub,
                        scale=sub.get("scale"), schema=(version.get("schema") or {}).get("openAPIV3Schema"),
                        categories=names.get("categories", []),
                        printer_columns=version.get("additionalPrinterColumns") or [])
            self.add(kind)
            added.append(kind)
        return added
