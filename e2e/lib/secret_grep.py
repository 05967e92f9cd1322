"""Fails when a secret value appears in any of the given files (an operator's outputs: its log,
the events and custom resources it wrote).

    WEIR_GREP_SECRETS="$token"$'\n'"$s3_secret_key" python3 e2e/lib/secret_grep.py FILE...

The values come from the environment (one per line; never the command line, where `ps` shows
them) and are looked for as written, base64-encoded (as in a Secret's data) and hex-encoded. A hit
names the file, the line and which value (by position, never the value), and exits 1. Values
shorter than 8 characters are refused: they would match by chance.
"""

from __future__ import annotations

import base64
import os
import sys


def forms(value: str) -> list:
    raw = value.encode()
    return [("as written", raw), ("base64", base64.b64encode(raw)), ("hex", raw.hex().encode())]


def hits(secrets: list, path: str) -> list:
    """(line number, secret position, form) for every occurrence in the file."""
    out = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            for i, value in enumerate(secrets, 1):
                for form, needle in forms(value):
                    if needle in line:
                        out.append((n, i, form))
    return out


def main(argv: list) -> int:
    secrets = [s.strip() for s in os.environ.get("WEIR_GREP_SECRETS", "").splitlines() if s.strip()]
    if not secrets:
        print("secret-grep: WEIR_GREP_SECRETS names no value to look for", file=sys.stderr)
        return 2
    short = [i for i, s in enumerate(secrets, 1) if len(s) < 8]
    if short:
        print(f"secret-grep: values {short} are shorter than 8 characters; they would match by chance", file=sys.stderr)
        return 2
    if not argv:
        print("secret-grep: no files given", file=sys.stderr)
        return 2
    found = 0
    for path in argv:
        for n, i, form in hits(secrets, path):
            print(f"secret-grep: {path}:{n}: secret #{i} ({form})")
            found += 1
    if found:
        print(f"secret-grep: FAIL: {found} occurrences of {len(secrets)} secret values in {len(argv)} files")
        return 1
    print(f"secret-grep: none of {len(secrets)} secret values in {len(argv)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
