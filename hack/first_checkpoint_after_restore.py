#!/usr/bin/env python3
"""Bytes the first native checkpoint after a fast restore uploads and references (branch
restoredrefs, docs/runtime/state-backends-log.md): a keyed count over a generator of 2M keys at
400,000 records/s on the disk backend with native incremental checkpoints every 2 s
(parallelism 1, local checkpoint storage), killed (-9) once a checkpoint holds 1.5M keys, then
restored from its latest checkpoint (a claimed restore: the job's own checkpoint directory) and
killed again once the first checkpoint after the restore completed. Prints that checkpoint's
table files uploaded by it and referenced from earlier checkpoints, from its `_metadata`
(bytes: independent of the machine's load).

    first_checkpoint_after_restore.py WEIR_BINARY TAG   # scratch in /tmp/first-checkpoint-after-restore/TAG
"""
import json, os, subprocess, sys, time, shutil, glob
weir, tag = sys.argv[1], sys.argv[2]
base = f"/tmp/first-checkpoint-after-restore/{tag}"
shutil.rmtree(base, ignore_errors=True)
os.makedirs(base)
ckpt = f"{base}/checkpoints"
manifest = f"""apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: refs }}
spec:
  parallelism: 1
  stateBackend: disk
  checkpointing: {{ interval: 2s, storage: "{ckpt}", retained: 2, incremental: true }}
  job:
    steps:
      - source: {{ generator: {{ seed: 7, count: 200000000, keys: 2000000, maxRecordsPerSecond: 400000 }} }}
      - keyBy: {{ expression: key, as: key }}
      - count: {{}}
      - sink: {{ discard: {{}} }}
"""
open(f"{base}/job.yaml", "w").write(manifest)
env = dict(os.environ, WEIR_NATIVE_CHECKPOINTS="on", WEIR_STATE_DIR=f"{base}/state", WEIR_LOG="warn,weir=info,weir_runtime=warn")

def metadata(i):
    p = f"{ckpt}/refs/chk-{i}/_metadata"
    try:
        raw = open(p, "rb").read()
    except FileNotFoundError:
        return None
    return json.loads(raw.split(b"\n", 1)[1])

def completed():
    ids = []
    for d in glob.glob(f"{ckpt}/refs/chk-*"):
        if os.path.exists(d + "/_metadata"):
            ids.append(int(d.rsplit("-", 1)[1]))
    return sorted(ids)

def run(args, until, timeout=240):
    log = open(f"{base}/run-{time.time():.0f}.log", "w")
    p = subprocess.Popen([weir, "run", f"{base}/job.yaml", "--listen", "127.0.0.1:0"] + args, env=env, stdout=subprocess.DEVNULL, stderr=log)
    seen = {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        for i in completed():
            if i not in seen:
                m = metadata(i)
                if m: seen[i] = m
        if until(seen): break
        time.sleep(0.01)
    p.kill(); p.wait()
    return seen

def tables(m):
    up, ref, priv = [], [], []
    for o in m["operators"]:
        for h in o["handles"]:
            for f in (h.get("native") or {}).get("files", []):
                if f["name"].endswith(".sst"):
                    (up if f["checkpointId"] == m["checkpointId"] else ref).append(f["size"])
                else:
                    priv.append(f["size"])
    return up, ref, priv

def entries(m):
    return sum(h["entries"] for o in m["operators"] if o["kind"] != "source" for h in o["handles"] if h.get("native"))

# Run 1: until a native checkpoint holding >= 1.5M keys completed, then kill -9.
seen = run([], lambda s: any(entries(m) >= 1_500_000 for m in s.values()))
restored = max(completed())
m = metadata(restored)
up, ref, priv = tables(m)
print(f"{tag}: restored checkpoint {restored}: {entries(m)} keys, {len(up)+len(ref)} table files, {sum(up)+sum(ref)} bytes")
# Run 2: restore latest; until the first checkpoint after it completed, then kill -9.
seen = run(["--restore", "latest"], lambda s: any(i > restored for i in s))
first = min(i for i in seen if i > restored)
up, ref, priv = tables(seen[first])
print(f"{tag}: first checkpoint {first} after restoring {restored}: uploaded {len(up)} table files {sum(up)} bytes + {len(priv)} private files {sum(priv)} bytes; referenced {len(ref)} table files {sum(ref)} bytes")
