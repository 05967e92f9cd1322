"""Starts the cluster stand-in: API server on loopback, controllers and the process kubelet.

    python3 e2e/standin/main.py --dir DIR [--port N] --binary weir=PATH --binary weir-operator=PATH

Writes DIR/kubeconfig (the admin, `system:masters`), DIR/proxy-url (the HTTP forward proxy the
pods use to reach Services: `curl -x` it to reach `http://<svc>.<ns>.svc:<port>` with headers the
API server's service proxy would drop, such as a bearer token) and DIR/ready once serving; the request log
of every API call goes to DIR/requests.jsonl. Stops on SIGTERM/SIGINT, killing its pods.
"""

from __future__ import annotations

import argparse
import os
import signal
import ssl
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rbac  # noqa: E402
from apiserver import ApiServer, Tokens  # noqa: E402
from kubelet import Kubelet, write_kubeconfig  # noqa: E402
from network import Network  # noqa: E402
from store import Store  # noqa: E402


def start(directory: str, port: int = 0, binaries: dict | None = None, history: int = 5000,
          run_kubelet: bool = True, compact_seconds: float = 0):
    """Starts everything in threads; returns (server, store, kubelet, url). With
    `compact_seconds`, the watch history is compacted that often, as etcd is every 5 minutes:
    a watch resumed from an older resourceVersion then gets 410 Gone and the client relists."""
    os.makedirs(directory, exist_ok=True)
    store = Store(history=history)
    tokens = Tokens()
    network = Network(store)
    request_log = rbac.RequestLog(os.path.join(directory, "requests.jsonl"))
    ca_file, cert_file, key_file = make_certificates(directory)
    server = ApiServer(("127.0.0.1", port), store, tokens, request_log, network)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    url = f"https://127.0.0.1:{server.server_address[1]}"
    # Plain HTTP on a second port: the HTTP forward proxy (pods' HTTP_PROXY), no API access.
    proxy = ApiServer(("127.0.0.1", 0), store, Tokens.__new__(Tokens), request_log, network)
    proxy.tokens.users = {}
    proxy_url = f"http://127.0.0.1:{proxy.server_address[1]}"
    kubelet = Kubelet(store, network, directory, binaries or {}, url, tokens, proxy_url, ca_file)
    server.kubelet = kubelet
    for s in (server, proxy):
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    if run_kubelet:
        threading.Thread(target=kubelet.run, daemon=True).start()
    if compact_seconds:
        def compact_forever() -> None:
            while not server.stopping.wait(compact_seconds):
                store.compact()
        threading.Thread(target=compact_forever, daemon=True).start()
    write_kubeconfig(os.path.join(directory, "kubeconfig"), url, "standin-admin", ca_file=ca_file)
    server.proxy = proxy
    return server, store, kubelet, url


def make_certificates(directory: str) -> tuple:
    """A CA and a serving certificate for 127.0.0.1 (openssl), as (ca, cert, key) paths."""
    tls = os.path.join(directory, "tls")
    os.makedirs(tls, exist_ok=True)
    ca, ca_key = os.path.join(tls, "ca.crt"), os.path.join(tls, "ca.key")
    cert, key, csr = os.path.join(tls, "apiserver.crt"), os.path.join(tls, "apiserver.key"), os.path.join(tls, "a.csr")
    ext = os.path.join(tls, "ext.cnf")
    if not os.path.exists(cert):
        run = lambda *a: subprocess.run(a, check=True, capture_output=True)
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca,
            "-days", "2", "-subj", "/CN=weir-standin-ca")
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=standin")
        with open(ext, "w", encoding="utf-8") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                    "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert,
            "-days", "2", "-extfile", ext)
    return ca, cert, key


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, help="state directory (kubeconfig, pods, logs, request log)")
    parser.add_argument("--port", type=int, default=0, help="API server port on 127.0.0.1 (0: any free port)")
    parser.add_argument("--compact-seconds", type=float, default=300,
                        help="compact the watch history this often (0: never; etcd's default is 300)")
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                        help="local executable for a container command basename (repeatable)")
    args = parser.parse_args()
    binaries = {}
    for item in args.binary:
        name, sep, path = item.partition("=")
        if not sep or not os.access(path, os.X_OK):
            parser.error(f"--binary {item!r}: expected NAME=PATH of an executable")
        binaries[name] = os.path.abspath(path)
    server, store, kubelet, url = start(args.dir, args.port, binaries, compact_seconds=args.compact_seconds)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    with open(os.path.join(args.dir, "proxy-url"), "w", encoding="utf-8") as f:
        f.write(f"http://127.0.0.1:{server.proxy.server_address[1]}\n")
    with open(os.path.join(args.dir, "ready"), "w", encoding="utf-8") as f:
        f.write(url + "\n")
    print(f"standin: serving {url}; kubeconfig {os.path.join(args.dir, 'kubeconfig')}", flush=True)
    done.wait()
    server.stopping.set()
    kubelet.shutdown()
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
