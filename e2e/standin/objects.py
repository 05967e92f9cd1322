"""Pure helpers over Kubernetes objects as JSON dicts: merge patches, field paths, selectors.

No I/O here; the store and the kubelet build on these. Field paths are tuples of keys; lists
are leaves (atomic), which is how this stand-in tracks server-side-apply ownership.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Iterable

Path = tuple  # a path of dict keys from the object root, e.g. ("spec", "parallelism")

# Top-level and metadata fields that no field manager owns (the server sets them).
UNOWNED_METADATA = {"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                    "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink",
                    "generateName"}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, `null` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch as kubectl sends for built-in kinds: like a merge patch, except
    lists of objects that all carry `name` (containers, env, ports, volumes) merge by name, and
    `$patch`/`$retainKeys`/`$setElementOrder` directives are dropped."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$") or key.startswith("$setElementOrder"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and _named_list(value) and _named_list(result.get(key)):
            merged = {item["name"]: copy.deepcopy(item) for item in result.get(key) or []}
            order = [item["name"] for item in result.get(key) or []]
            for item in value:
                if item.get("$patch") == "delete":
                    merged.pop(item["name"], None)
                    continue
                if item["name"] not in merged:
                    order.append(item["name"])
                merged[item["name"]] = strategic_merge_patch(merged.get(item["name"]), item)
            result[key] = [merged[n] for n in order if n in merged]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def json_patch(target: Any, operations: list) -> Any:
    """RFC 6902 JSON patch (add, remove, replace, test, copy, move). Raises ValueError."""
    doc = copy.deepcopy(target)

    def parse(pointer: str) -> list:
        if pointer == "":
            return []
        return [p.replace("~1", "/").replace("~0", "~") for p in pointer.lstrip("/").split("/")]

    def walk(parts: list):
        node = doc
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node, parts[-1]

    for op in operations:
        kind, parts = op.get("op"), parse(op.get("path", ""))
        if kind == "test":
            node = doc
            for part in parts:
                node = node[int(part)] if isinstance(node, list) else node[part]
            if node != op.get("value"):
                raise ValueError(f"test operation failed at {op.get('path')}")
            continue
        value = op.get("value")
        if kind in ("copy", "move"):
            node = doc
            for part in parse(op["from"]):
                node = node[int(part)] if isinstance(node, list) else node[part]
            value = copy.deepcopy(node)
            if kind == "move":
                parent, last = walk(parse(op["from"]))
                del parent[int(last) if isinstance(parent, list) else last]
            kind = "add"
        parent, last = walk(parts)
        if kind == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), value)
            else:
                parent[last] = value
        elif kind == "replace":
            parent[int(last) if isinstance(parent, list) else last] = value
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        else:
            raise ValueError(f"unknown JSON patch operation {kind!r}")
    return doc


def leaf_paths(obj: Any, prefix: Path = ()) -> set:
    """The leaf field paths of `obj` (lists and scalars are leaves; empty dicts are leaves)."""
    if isinstance(obj, dict) and obj:
        out = set()
        for key, value in obj.items():
            out |= leaf_paths(value, prefix + (key,))
        return out
    return {prefix}


def owned_paths(obj: dict) -> set:
    """Leaf paths of an applied or written object that a field manager can own."""
    paths = set()
    for path in leaf_paths(obj):
        if not path or path[0] in ("apiVersion", "kind", "status") and len(path) == 1:
            continue
        if path[0] in ("apiVersion", "kind"):
            continue
        if path[0] == "metadata" and (len(path) < 2 or path[1] in UNOWNED_METADATA):
            continue
        paths.add(path)
    return paths


def get_path(obj: Any, path: Iterable, default: Any = None) -> Any:
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def set_path(obj: dict, path: Path, value: Any) -> None:
    node = obj
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = copy.deepcopy(value)


def delete_path(obj: dict, path: Path) -> None:
    """Deletes the field at `path` and then any parent dict it leaves empty."""
    parents = []
    node = obj
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return
        parents.append((node, key))
        node = node[key]
    if isinstance(node, dict):
        node.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key] == {}:
            del parent[key]
        else:
            break


def overlaps(a: Path, b: Path) -> bool:
    """True when one path is a prefix of the other (they name the same or nested fields)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def path_text(path: Path) -> str:
    return "." + ".".join(path)


def fields_v1(paths: Iterable) -> dict:
    """The managedFields `fieldsV1` rendering (`f:` keys) of a set of leaf paths."""
    root: dict = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


# --- selectors ------------------------------------------------------------------------------------

_SET_RE = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_selector(text: str) -> list:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current)
    return parts


def parse_label_selector(text: str) -> list:
    """Parses `a=b,c!=d,e,!f,g in (x,y),h notin (z)` into requirements. Raises ValueError."""
    reqs = []
    for part in _split_selector(text or ""):
        part = part.strip()
        if "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append(("notin", key.strip(), {value.strip()}))
        elif "==" in part or ("=" in part and " in " not in part):
            key, value = re.split("==?", part, maxsplit=1)
            reqs.append(("in", key.strip(), {value.strip()}))
        else:
            m = _SET_RE.match(part)
            if not m:
                raise ValueError(f"unable to parse requirement: {part!r}")
            neg, key, op, values = m.groups()
            if op:
                reqs.append((op, key, {v.strip() for v in values.split(",") if v.strip()}))
            else:
                reqs.append(("absent" if neg else "exists", key, set()))
    return reqs


def labels_match(reqs: list, labels: dict | None) -> bool:
    labels = labels or {}
    for op, key, values in reqs:
        if op == "in" and labels.get(key) not in values:
            return False
        if op == "notin" and key in labels and labels[key] in values:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "absent" and key in labels:
            return False
    return True


def selector_from_match_labels(match_labels: dict) -> list:
    return [("in", k, {v}) for k, v in (match_labels or {}).items()]


def parse_field_selector(text: str) -> list:
    """`a.b=x,c!=y` into (path, op, value) requirements."""
    reqs = []
    for part in _split_selector(text or ""):
        part = part.strip()
        if "!=" in part:
            key, value = part.split("!=", 1)
            reqs.append((key.strip().split("."), "!=", value.strip()))
        elif "=" in part:
            key, value = re.split("==?", part, maxsplit=1)
            reqs.append((key.strip().split("."), "=", value.strip()))
        else:
            raise ValueError(f"invalid field selector: {part!r}")
    return reqs


def fields_match(reqs: list, obj: dict) -> bool:
    for path, op, value in reqs:
        got = get_path(obj, path)
        got = "" if got is None else (json.dumps(got) if isinstance(got, (dict, list)) else str(got))
        if (op == "=") != (got == value):
            return False
    return True
