#!/usr/bin/env python3
"""Validate examples/*.yaml custom resources against the openAPIV3Schema of crds/*.yaml.

Structure only (types, enums, required, no unknown fields): CEL rules are checked by the Rust
test `operator/tests/crds.rs`. Usage: python3 operator/tests/validate_examples.py
Prints 'N passed, N failed' and exits non-zero on any failure.
"""
import glob
import os
import sys

import jsonschema
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def to_jsonschema(s):
    """OpenAPI v3 (Kubernetes dialect) -> JSON Schema: nullable, int-or-string, strict objects."""
    if not isinstance(s, dict):
        return s
    s = dict(s)
    s.pop("x-kubernetes-validations", None)
    if s.pop("x-kubernetes-int-or-string", False):
        s["type"] = ["integer", "string"]
    preserve = s.pop("x-kubernetes-preserve-unknown-fields", False)
    if "properties" in s:
        s["properties"] = {k: to_jsonschema(v) for k, v in s["properties"].items()}
        if not preserve and "additionalProperties" not in s:
            s["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        s["additionalProperties"] = to_jsonschema(s["additionalProperties"])
    if "items" in s:
        s["items"] = to_jsonschema(s["items"])
    if s.pop("nullable", False) and "type" in s:
        t = s["type"]
        s["type"] = (t if isinstance(t, list) else [t]) + ["null"]
    return s


def main():
    schemas = {}
    for path in glob.glob(os.path.join(ROOT, "crds", "*.yaml")):
        with open(path) as f:
            crd = yaml.safe_load(f)
        for v in crd["spec"]["versions"]:
            key = (crd["spec"]["group"] + "/" + v["name"], crd["spec"]["names"]["kind"])
            schema = to_jsonschema(v["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            schema["properties"]["apiVersion"] = {"type": "string"}
            schema["properties"]["kind"] = {"type": "string"}
            schemas[key] = schema
    passed = failed = 0
    # Every custom resource among the examples: the README says `kubectl apply` takes them.
    examples = sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml")))
    for path in examples:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc or not str(doc.get("apiVersion", "")).startswith("weir.dev/"):
                    continue
                key = (doc.get("apiVersion"), doc.get("kind"))
                name = f"{os.path.relpath(path, ROOT)} {key[1]}/{doc['metadata']['name']}"
                try:
                    jsonschema.validate(doc, schemas[key])
                    passed += 1
                    print(f"ok {name}")
                except (KeyError, jsonschema.ValidationError) as e:
                    failed += 1
                    print(f"FAIL {name}: {getattr(e, 'message', e)}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
