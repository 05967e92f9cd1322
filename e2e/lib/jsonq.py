#!/usr/bin/env python3
"""jq-like helper for the e2e shell scripts: `jsonq EXPR` reads JSON from stdin, binds it to `d`
and prints the value of the Python expression EXPR. A missing key or index (KeyError,
IndexError, TypeError) prints nothing and exits 0; None prints nothing; bools print
true/false; dicts and lists print as JSON."""
import json
import sys

if len(sys.argv) != 2:
    sys.exit("usage: jsonq EXPR < doc.json")
d = json.load(sys.stdin)
try:
    v = eval(sys.argv[1], {"__builtins__": __builtins__}, {"d": d})  # noqa: S307 - test helper
except (KeyError, IndexError, TypeError):
    sys.exit(0)
if v is None:
    sys.exit(0)
if isinstance(v, bool):
    print("true" if v else "false")
elif isinstance(v, (dict, list)):
    print(json.dumps(v))
else:
    print(v)
