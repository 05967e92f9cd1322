#!/usr/bin/env python3
"""Checks a word-count job's committed output against counts computed here from the input.

The job (e2e/manifests/wordcount-s3.yaml) lowercases each line, splits it on the regex `\\W+`
(Unicode), drops empty tokens, keys by word and emits a running count, so its committed output is
one JSON line `{"word": w, "count": k}` for every k = 1..N(w), where N(w) is the number of
occurrences of w in the input. This script recomputes N(w) from the same files and compares.

Modes:
  exact      every (word, k) for k = 1..N(w) appears exactly once, and nothing else appears
             (exactly-once across checkpoints, savepoints, rescales, upgrades and failures).
  restarted  a stateless redeploy: the output is one complete run plus the committed prefix of
             the run that was replaced, i.e. every (word, k) appears at least once and the extra
             records, per word, are exactly k = 1..m(w) for some m(w) (a prefix, never a gap).

Usage: wordcount_check.py --input DIR [--mode exact|restarted] < output.jsonl
Exit status 0 when the output matches; otherwise a summary of the differences and status 1.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys

SPLIT = re.compile(r"\W+")  # str patterns are Unicode-aware in Python 3, like Rust's regex


def expected_counts(input_dir):
    counts = collections.Counter()
    files = sorted(glob.glob(os.path.join(input_dir, "*.txt")))
    if not files:
        sys.exit(f"wordcount_check: no *.txt files in {input_dir}")
    for path in files:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n").rstrip("\r")
                counts.update(t for t in SPLIT.split(line.lower()) if t)
    return counts


def read_output(stream):
    got = collections.Counter()
    bad = 0
    for n, line in enumerate(stream, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
            got[(rec["word"], int(rec["count"]))] += 1
        except (ValueError, KeyError, TypeError) as e:
            bad += 1
            if bad <= 5:
                print(f"wordcount_check: unparsable output line {n}: {line[:120]!r} ({e})", file=sys.stderr)
    return got, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", required=True, help="directory holding the input *.txt files")
    ap.add_argument("--mode", choices=["exact", "restarted"], default="exact")
    args = ap.parse_args()

    expected = expected_counts(args.input)
    want = collections.Counter({(w, k): 1 for w, n in expected.items() for k in range(1, n + 1)})
    got, bad = read_output(sys.stdin)
    problems = []
    if bad:
        problems.append(f"{bad} unparsable output lines")

    missing = want - got
    if missing:
        sample = sorted(missing)[:10]
        problems.append(f"{sum(missing.values())} expected (word, count) records missing, e.g. {sample}")

    extra = got - want
    if args.mode == "exact":
        if extra:
            dup = sorted(k for k in extra if k in want)[:10]
            unknown = sorted(k for k in extra if k not in want)[:10]
            problems.append(
                f"{sum(extra.values())} unexpected records (duplicates e.g. {dup}; not in the input e.g. {unknown})"
            )
    else:
        per_word = collections.defaultdict(list)
        for (w, k), c in extra.items():
            if c != 1 or k > expected.get(w, 0):
                problems.append(f"record ({w!r}, {k}) appears {c + 1} times or exceeds the input count")
                continue
            per_word[w].append(k)
        gaps = [w for w, ks in per_word.items() if sorted(ks) != list(range(1, len(ks) + 1))]
        if gaps:
            problems.append(f"the replaced run's output is not a prefix for words {sorted(gaps)[:10]}")

    records = sum(got.values())
    if problems:
        for p in problems:
            print(f"wordcount_check: FAIL: {p}", file=sys.stderr)
        print(f"wordcount_check: {records} records read, {sum(want.values())} expected ({args.mode})", file=sys.stderr)
        return 1
    print(f"wordcount_check: OK ({args.mode}): {records} records, {len(expected)} distinct words")
    return 0


if __name__ == "__main__":
    sys.exit(main())
