#!/usr/bin/env python3
"""Self-test of e2e/lib/wordcount_check.py on a small text: an exact output passes; a duplicate,
a missing record or an unknown word fails `exact`; a prefix of a replaced run passes `restarted`
and a gap in it fails. Prints "N passed, M failed"."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECK = os.path.join(ROOT, "e2e", "lib", "wordcount_check.py")
TEXT = "The whale, the WHALE!\r\nCall me Ishmael. Über-whale; naïve_fish 42\n\nthe end\n"
# lowercased, split on \W+ (Unicode): underscores and non-ASCII letters are word characters
COUNTS = {"the": 3, "whale": 3, "call": 1, "me": 1, "ishmael": 1, "über": 1, "naïve_fish": 1, "42": 1, "end": 1}

passed = failed = 0


def run(records, mode, input_dir):
    data = "".join(json.dumps({"word": w, "count": k}) + "\n" for w, k in records)
    r = subprocess.run([sys.executable, CHECK, "--input", input_dir, "--mode", mode],
                       input=data, capture_output=True, text=True)
    return r.returncode


def expect(name, records, mode, rc, input_dir):
    global passed, failed
    got = run(records, mode, input_dir)
    if got == rc:
        passed += 1
    else:
        failed += 1
        print(f"FAIL {name}: exit {got}, expected {rc}")


with tempfile.TemporaryDirectory() as d:
    with open(os.path.join(d, "a.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TEXT)
    exact = [(w, k) for w, n in COUNTS.items() for k in range(1, n + 1)]
    expect("exact output", exact, "exact", 0, d)
    expect("shuffled exact output", list(reversed(exact)), "exact", 0, d)
    expect("duplicate", exact + [("the", 2)], "exact", 1, d)
    expect("missing", exact[1:], "exact", 1, d)
    expect("unknown word", exact + [("moby", 1)], "exact", 1, d)
    expect("count beyond input", exact + [("end", 2)], "exact", 1, d)
    expect("restarted: complete run + prefix", exact + [("the", 1), ("the", 2), ("whale", 1)], "restarted", 0, d)
    expect("restarted: gap in prefix", exact + [("the", 2)], "restarted", 1, d)
    expect("restarted: incomplete", exact[2:] + [("the", 1)], "restarted", 1, d)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
