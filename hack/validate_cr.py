#!/usr/bin/env python3
"""Validates custom resources (StreamJob, Savepoint manifests) against the OpenAPI v3 schemas of
the CRDs in a directory, the way the API server does with strict field validation: types, enums,
required fields, and unknown fields rejected (except under x-kubernetes-preserve-unknown-fields).
CEL rules (x-kubernetes-validations) are not evaluated here; e2e scenario 9 checks them on a
real API server.

Usage: validate_cr.py CRD_DIR MANIFEST.yaml...
"""
import copy
import glob
import os
import sys

import jsonschema
import yaml


def strict(schema):
    """Copy of a structural schema where objects with properties reject unknown fields."""
    s = copy.deepcopy(schema)

    def walk(node):
        if not isinstance(node, dict):
            return
        if (node.get("type") == "object" and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for key in ("properties", "patternProperties"):
            for child in node.get(key, {}).values():
                walk(child)
        for key in ("items", "additionalProperties", "not"):
            walk(node.get(key))
        for key in ("allOf", "anyOf", "oneOf"):
            for child in node.get(key, []):
                walk(child)

    walk(s)
    return s


def load_crds(crd_dir):
    schemas = {}
    for path in sorted(glob.glob(os.path.join(crd_dir, "*.yaml"))):
        with open(path) as f:
            for crd in yaml.safe_load_all(f):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
                for v in crd["spec"]["versions"]:
                    schema = strict(v["schema"]["openAPIV3Schema"])
                    # apiVersion/kind/metadata are validated by the API server itself.
                    schema.setdefault("properties", {}).update(
                        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
                    schemas[(f"{group}/{v['name']}", kind)] = schema
    return schemas


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    schemas = load_crds(sys.argv[1])
    if not schemas:
        sys.exit(f"validate_cr: no CRDs in {sys.argv[1]}")
    errors = checked = 0
    for path in sys.argv[2:]:
        with open(path) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for doc in docs:
            key = (doc.get("apiVersion"), doc.get("kind"))
            name = f"{path}: {key[1]}/{doc.get('metadata', {}).get('name')}"
            if key not in schemas:
                print(f"validate_cr: {name}: no CRD for {key[0]} {key[1]}")
                errors += 1
                continue
            checked += 1
            v = jsonschema.Draft4Validator(schemas[key])
            for e in sorted(v.iter_errors(doc), key=lambda e: list(e.path)):
                print(f"validate_cr: {name}: {'.'.join(map(str, e.path)) or '<root>'}: {e.message}")
                errors += 1
    print(f"validate_cr: {checked} resources checked, {errors} errors")
    return 1 if errors or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
