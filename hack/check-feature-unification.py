#!/usr/bin/env python3
"""Fails when `cargo build -p <member>` would pick other crate features than the workspace build.

Cargo resolves features per invocation: `cargo run -p weir-runtime` only sees the runtime's
dependency edges, while `cargo build --workspace` (and `cargo test --workspace`) also sees the
operator's. A crate compiled with two feature sets is compiled twice, with everything that depends
on it (the first-run build measured 47 crates built a second time). The runtime's Cargo.toml names
the features the operator's dependencies turn on (a workspace-hack by hand); this check keeps it
in step with the lock file.

Usage: hack/check-feature-unification.py            (from anywhere; runs `cargo tree`, no build)
Exit status: 0 when every member's features equal the workspace's, 1 otherwise (each difference
printed as `<member> <crate> <version>: workspace adds [features]`, with what to do).
"""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEMBERS = ["weir-runtime", "weir-operator"]
# normal + build: `cargo run`/`cargo build`; dev: `cargo test -p`.
EDGE_SETS = ["normal,build", "normal,build,dev"]
LINE = re.compile(r"(\S+) (v\S+).*\[(.*)\]$")


def features(selection, edges):
    """Maps (crate, version) to its enabled features for one `cargo tree` selection."""
    out = subprocess.run(
        ["cargo", "tree", *selection, "-e", edges, "-f", "{p} [{f}]", "--prefix", "none"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout
    result = {}
    for line in out.splitlines():
        match = LINE.match(line.replace(" (*)", "").replace(" (proc-macro)", ""))
        if match:
            result[(match[1], match[2])] = set(filter(None, match[3].split(",")))
    return result


def main():
    differences = []
    for edges in EDGE_SETS:
        workspace = features(["--workspace"], edges)
        for member in MEMBERS:
            for key, enabled in sorted(features(["-p", member], edges).items()):
                extra = workspace.get(key, enabled) - enabled
                if extra:
                    differences.append(f"{member} {key[0]} {key[1]} ({edges}): workspace adds {sorted(extra)}")
    for line in differences:
        print(line)
    if differences:
        print("feature unification: name these features in the member's Cargo.toml "
              "(see the `Feature unification` comment in runtime/Cargo.toml)")
        return 1
    print("feature unification: every member builds with the workspace's features")
    return 0


if __name__ == "__main__":
    sys.exit(main())
