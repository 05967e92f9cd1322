"""e2e/lib/secret_grep.py finds a secret as written, base64 and hex, names no value, and passes
clean files (run by hack/static-checks.sh)."""

import base64
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "e2e", "lib", "secret_grep.py")
TOKEN = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
S3_KEY = "weir-e2e-secret"


def run(secrets, *contents):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, text in enumerate(contents):
            p = os.path.join(d, f"f{i}")
            with open(p, "w") as f:
                f.write(text)
            paths.append(p)
        env = {**os.environ, "WEIR_GREP_SECRETS": "\n".join(secrets)}
        r = subprocess.run([sys.executable, SCRIPT, *paths], capture_output=True, text=True, env=env)
        return r.returncode, r.stdout + r.stderr


clean = '{"level":"INFO","message":"job Running","job":"wc"}\n'
rc, out = run([TOKEN, S3_KEY], clean, '{"status": {"lifecycleState": "Running"}}')
assert rc == 0, out
for leaked in (f"token {TOKEN}\n", f'{{"data": "{base64.b64encode(TOKEN.encode()).decode()}"}}\n',
               f"key={S3_KEY.encode().hex()}\n", f"aws secret {S3_KEY}"):
    rc, out = run([TOKEN, S3_KEY], clean, leaked)
    assert rc == 1, (leaked, out)
    assert TOKEN not in out and S3_KEY not in out, out
    assert ":1: secret #" in out, out
rc, out = run(["short"], clean)
assert rc == 2 and "shorter than 8" in out, out
rc, out = run([], clean)
assert rc == 2, out
print("secret_grep: 7 cases passed")
