"""The health watcher's node agent: serves this GPU node's raw health data to the watcher's controller.

One pod per GPU node (a DaemonSet per GPU pool, :mod:`gpufleet.infra.health_watch`). It judges nothing and
writes nothing: on each ``GET /bundle`` it collects the outputs the ``node_validation`` role collects over SSH
(``nvidia-smi -q -x``, the loaded module's version, ``/proc/modules``, the kernel log's Xid lines) and answers
them as the role's JSON bundle (``health.NodeData.from_bundle``); the controller judges them with the same
``health.evaluate_node`` and acts with the same rate-limited code as ``gpufleet validate --apply``.

Why an HTTP answer and not a report written to the API (a ConfigMap or a Node annotation): writing needs an
API token with write access on every GPU node, and RBAC cannot narrow it to "this node's own object", so one
compromised pod could forge every node's report or (with ``nodes patch``) untaint itself. The agent has no
token at all (``automountServiceAccountToken: false``); the controller finds the agents by listing their pods
and takes each report's node from the pod's ``spec.nodeName`` (set by the scheduler), never from the report;
a NetworkPolicy lets only the controller reach the port.

Inside the pod: ``nvidia-smi`` and the NVML library come from the NVIDIA container runtime (runtime class
``nvidia``, ``NVIDIA_DRIVER_CAPABILITIES=utility``); ``/proc/modules`` and ``/sys/module`` are the host's
(module state is not namespaced); the kernel log is the host's syslog file, mounted read-only. Fabric
manager's state comes from ``nvidia-smi``'s fabric section (Hopper and later); where it has none, the pod
cannot see the unit and the controller leaves that check to ``gpufleet validate`` over SSH.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpufleet.validation.health import BUNDLE_SCHEMA

#: Port the agent answers on (the controller and the NetworkPolicy use the same).
AGENT_PORT = 9476
XID_MARK = "NVRM: Xid"
#: Most bytes read from the kernel log per check: a log flooding with lines must not stall the agent.
READ_MAX = 8 << 20
_FABRIC = re.compile(r"<fabric>\s*<state>([^<]*)</state>\s*<status>([^<]*)</status>", re.DOTALL)


def _run(argv: Sequence[str], timeout: float = 60) -> dict[str, Any]:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"rc": None, "stdout": "", "stderr": str(e)}
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def fabric_state(smi_xml: str) -> str | None:
    """Fabric manager's state as systemd would name it, from ``nvidia-smi -q -x``'s per-GPU fabric section:
    ``active`` when every GPU's fabric registration is Completed with status Success, else the first other
    state/status; None when no GPU reports one (N/A: not an NVSwitch system, or older than Hopper)."""
    seen = [(st.strip(), status.strip()) for st, status in _FABRIC.findall(smi_xml)]
    seen = [(st, status) for st, status in seen if st not in ("", "N/A")]
    if not seen:
        return None
    bad = next(((st, status) for st, status in seen if st != "Completed" or status != "Success"), None)
    return "active" if bad is None else f"fabric {bad[0]} ({bad[1]})"


class KernelLogTail:
    """The Xid lines appended to a syslog file since the agent started, kept for ``window_s`` seconds.

    Only new lines count: an Xid logged before (that the operator already handled) must not act again, the
    same rule as the Slurm health program's ``journalctl --since``. A rotated file (new inode, or shorter than
    what was read) is read from its start. What an Xid leaves behind (ECC counts, a missing GPU, a pending
    row remap) is read from ``nvidia-smi`` on every check, whenever the Xid was logged."""

    def __init__(self, path: str, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.window_s, self.clock = path, window_s, clock
        self.lines: list[tuple[float, str]] = []
        self.inode, self.offset = self._stat()

    def _stat(self) -> tuple[int | None, int]:
        try:
            st = os.stat(self.path)
        except OSError:
            return None, 0
        return st.st_ino, st.st_size

    def read(self) -> list[str]:
        now = self.clock()
        inode, size = self._stat()
        if inode is not None:
            if inode != self.inode or size < self.offset:
                self.inode, self.offset = inode, 0
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    chunk = f.read(READ_MAX)
            except OSError:
                chunk = b""
            # Only whole lines: a line being written is read complete at the next check.
            end = chunk.rfind(b"\n") + 1
            self.offset += end
            for line in chunk[:end].decode("utf-8", errors="replace").splitlines():
                if XID_MARK in line:
                    self.lines.append((now, line))
        self.lines = [(t, ln) for t, ln in self.lines if now - t <= self.window_s]
        return [ln for _, ln in self.lines]


def collect(ns: argparse.Namespace, klog: KernelLogTail) -> dict[str, Any]:
    """This node's raw outputs as a ``node_validation`` bundle (the keys ``NodeData.from_bundle`` reads)."""
    smi = _run([ns.nvidia_smi, "-q", "-x"])
    module = _read(ns.module_version_path)
    fabric = fabric_state(smi["stdout"]) if smi["rc"] == 0 else None
    return {
        "schema": BUNDLE_SCHEMA,
        # What the agent believes; the controller uses the pod's spec.nodeName instead.
        "host": os.environ.get("NODE_NAME") or socket.gethostname().split(".")[0],
        "nvidia_smi": smi,
        "module_version": {"present": module is not None, "content": module or ""},
        "fabricmanager": {"state": fabric} if fabric is not None else {},
        "modules": _read(ns.modules_path),
        "kernel_log": {"lines": klog.read(), "source": ns.kernel_log_file},
    }


def handler(get_bundle: Callable[[], dict[str, Any]]) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif self.path == "/bundle":
                # One collection at a time: two nvidia-smi runs at once only slow each other down.
                with lock:
                    body = json.dumps(get_bundle()).encode()
                self._send(200, body, "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, status: int, body: bytes, ctype: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpufleet-health-agent", description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=AGENT_PORT)
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--module-version-path", default="/sys/module/nvidia/version")
    p.add_argument("--modules-path", default="/proc/modules")
    p.add_argument("--kernel-log-file", default="/host/var/log/kern.log")
    p.add_argument("--kernel-log-window-s", type=float, default=3600.0,
                   help="how long an Xid line keeps counting (longer than the controller's interval)")
    p.add_argument("--once", action="store_true", help="print one bundle and exit")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    klog = KernelLogTail(ns.kernel_log_file, ns.kernel_log_window_s)
    if ns.once:
        print(json.dumps(collect(ns, klog)))
        return 0
    server = ThreadingHTTPServer(("", ns.port), handler(lambda: collect(ns, klog)))
    print(f"gpufleet health agent: serving /bundle on :{ns.port}", file=sys.stderr)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
