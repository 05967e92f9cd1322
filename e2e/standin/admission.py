"""CRD admission as the API server does it for structural schemas: prune unknown fields, apply
defaults, validate types/required/enum/min/max/pattern, then the CEL `x-kubernetes-validations`
rules (transition rules with `oldSelf` only on updates where the old value exists).

`admit(schema, new, old)` returns (pruned-and-defaulted object, unknown field paths, errors);
each error is (field path text, message) in the shape the API server uses.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import celpy

_ENV = celpy.Environment()
_PROGRAMS: dict = {}

_TYPE_NAMES = {"object": "object", "array": "array", "string": "string", "integer": "integer",
               "number": "number", "boolean": "boolean"}


def _program(rule: str):
    if rule not in _PROGRAMS:
        _PROGRAMS[rule] = _ENV.program(_ENV.compile(rule))
    return _PROGRAMS[rule]


def _type_ok(value: Any, schema: dict) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    kind = schema.get("type")
    if kind is None:
        return True
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "null"


def prune_and_default(value: Any, schema: dict, path: str, unknown: list) -> Any:
    """Drops fields the schema does not declare (recording their paths in `unknown`), drops
    nulls of non-nullable fields that have a default, and fills in defaults."""
    if isinstance(value, dict) and (schema.get("type") == "object" or "properties" in schema):
        if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
            return value
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        out = {}
        for key, item in value.items():
            child_path = f"{path}.{key}" if path else key
            if props is not None and key in props:
                sub = props[key]
                if item is None and not sub.get("nullable") and "default" in sub:
                    continue
                out[key] = prune_and_default(item, sub, child_path, unknown)
            elif isinstance(additional, dict):
                out[key] = prune_and_default(item, additional, child_path, unknown)
            elif additional is True or schema.get("x-kubernetes-preserve-unknown-fields"):
                out[key] = item
            else:
                unknown.append(child_path)
        for key, sub in (props or {}).items():
            if key not in out and "default" in sub:
                out[key] = prune_and_default(copy.deepcopy(sub["default"]), sub, f"{path}.{key}", unknown)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(v, schema["items"], f"{path}[{i}]", unknown) for i, v in enumerate(value)]
    return value


def validate(value: Any, old: Any, schema: dict, path: str, errors: list, has_old: bool) -> None:
    """Appends (path, message) for every violation of `schema` by `value`."""
    shown = path or "<root>"
    if value is None:
        if not schema.get("nullable"):
            errors.append((shown, f'Invalid value: "null": {shown} in body must be of type '
                                  f'{_TYPE_NAMES.get(schema.get("type"), "object")}: "null"'))
        return
    if not _type_ok(value, schema):
        errors.append((shown, f'Invalid value: "{_describe(value)}": {shown} in body must be of type '
                              f'{schema.get("type")}: "{_describe(value)}"'))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(f'"{e}"' for e in schema["enum"])
        errors.append((shown, f'Unsupported value: "{value}": supported values: {allowed}'))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append((shown, f"Invalid value: {value}: {shown} in body should be greater than or "
                                  f"equal to {schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append((shown, f"Invalid value: {value}: {shown} in body should be less than or "
                                  f"equal to {schema['maximum']}"))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            errors.append((shown, f'Invalid value: "{value}": {shown} in body should be at least '
                                  f'{schema["minLength"]} chars long'))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errors.append((shown, f'Too long: may not be more than {schema["maxLength"]} bytes'))
        if schema.get("pattern") and not re.search(schema["pattern"], value):
            errors.append((shown, f'Invalid value: "{value}": {shown} in body should match '
                                  f'\'{schema["pattern"]}\''))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append((shown, f"Invalid value: {len(value)}: {shown} in body should have at least "
                                  f"{schema['minItems']} items"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append((shown, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                validate(item, None, schema["items"], f"{path}[{i}]", errors, False)
    if isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                child = f"{path}.{req}" if path else req
                errors.append((child, "Required value"))
        props = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key) or (additional if isinstance(additional, dict) else None)
            if sub is None:
                continue
            old_item = old.get(key) if isinstance(old, dict) else None
            item_has_old = has_old and isinstance(old, dict) and key in old
            validate(item, old_item, sub, f"{path}.{key}" if path else key, errors, item_has_old)
    for rule in schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        transition = "oldSelf" in text
        if transition and not has_old:
            continue
        bindings = {"self": celpy.json_to_cel(value)}
        if transition:
            bindings["oldSelf"] = celpy.json_to_cel(old)
        try:
            ok = _program(text).evaluate(bindings)
        except Exception as e:  # a CEL runtime error rejects the request, as in the API server
            ok = False
            rule = dict(rule, message=f"{rule.get('message') or text}: evaluation error: {e}")
        if not bool(ok):
            field = path + rule["fieldPath"] if rule.get("fieldPath") else shown
            message = rule.get("message") or f"failed rule: {text}"
            errors.append((field, f'Invalid value: "{_describe(value)}": {message}'))


def admit(schema: dict, obj: dict, old: dict | None) -> tuple:
    """Prunes, defaults and validates `obj` (a whole custom resource) against the version's
    openAPIV3Schema. Returns (object, unknown field paths, errors)."""
    unknown: list = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    body_schema = {"type": "object", "properties": {k: v for k, v in (schema.get("properties") or {}).items()
                                                    if k not in ("apiVersion", "kind", "metadata")}}
    pruned = prune_and_default(body, body_schema, "", unknown)
    errors: list = []
    old_body = None if old is None else {k: v for k, v in old.items() if k not in ("apiVersion", "kind", "metadata")}
    root = dict(schema, properties=body_schema["properties"])
    root.pop("required", None)
    validate(pruned, old_body, root, "", errors, old is not None)
    for req in schema.get("required", []):
        if req not in ("apiVersion", "kind", "metadata") and req not in pruned:
            errors.append((req, "Required value"))
    out = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": obj.get("metadata", {})}
    out.update(pruned)
    return out, unknown, errors
