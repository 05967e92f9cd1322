#!/usr/bin/env python3
"""Checks the relative links of the project's Markdown files: every linked file exists and every
`#anchor` names a heading of the linked file (GitHub's anchors: the heading lower-cased, its
punctuation dropped except `-` and `_`, spaces to `-`, a repeated heading suffixed `-1`, `-2`).
External links (`http:`, `https:`, `mailto:`) are not fetched.

    hack/check-doc-links.py          prints each broken link as `file:line: link: problem`; exit 1 if any
"""
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {"target", "node_modules", ".git", ".tools"}
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_files():
    found = []
    for directory, subdirectories, files in os.walk(ROOT):
        subdirectories[:] = [d for d in subdirectories if d not in SKIP_DIRS]
        found.extend(Path(directory) / name for name in files if name.endswith(".md"))
    return sorted(found)


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[`*]", "", text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_fences(path):
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        for _, line in lines_outside_fences(path):
            match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if match:
                base = slug(match.group(1))
                count = seen.get(base, 0)
                seen[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        _anchors[path] = found
    return _anchors[path]


def main():
    broken = []
    for path in markdown_files():
        for number, line in lines_outside_fences(path):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z]+:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(ROOT)}:{number}: {target}"
                if not linked.exists():
                    broken.append(f"{where}: no file {file_part}")
                elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                    broken.append(f"{where}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    for problem in broken:
        print(problem)
    if broken:
        print(f"{len(broken)} broken link(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
