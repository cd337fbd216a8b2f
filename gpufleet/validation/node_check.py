"""The node health check as Slurm runs it on a GPU node: HealthCheckProgram, Prolog and Epilog.

Slurm's programs run on the node, where the ``node_validation`` role's data usually travels to the controller
first. This program collects the same raw outputs locally (nvidia-smi -q -x, the loaded module's version,
fabric manager's unit state, /proc/modules, Xid kernel-log lines) and hands them to the same
``health.evaluate_node``: one implementation of the checks. It needs only python3's standard library (the
``slurm`` role installs the modules it imports next to it) and puts no load on the GPUs (nvidia-smi queries).

Modes:

``health``   HealthCheckProgram: on a critical finding, drain this node with the finding's drain reason
             (``scontrol update nodename=<host> state=drain reason="gpufleet:<finding>"``). A node drained
             this way stays drained until the operator resumes it (``scontrol update nodename=N state=resume``):
             Slurm's ReturnToService returns DOWN nodes, never DRAIN ones (slurm.conf.html, ReturnToService).
``prolog``   Prolog: the same checks before each job; exit 1 on a critical finding, so Slurm drains the node
             and requeues the job (slurm.conf.html, Prolog: "If the Prolog fails ... DRAIN state").
``epilog``   Epilog: exit 1 when a process still holds a GPU device (/dev/nvidia<N>) after the job, so Slurm
             drains the node instead of starting the next job on a GPU that is still in use.
``watch``    Plain hosts (no scheduler; the ``node_validation`` role's systemd timer): the same checks, then
             ``actions.run_actions`` with the marker executor on this one node: a critical finding writes
             ``<markers>/<host>.json`` (what ``gpufleet validate --apply-to marker`` writes), removed after
             ``--healthy-streak`` healthy checks in a row; ``gpufleet_health_actions.prom`` goes to node
             exporter's textfile directory, so the same alerts fire. Nothing is taken out of service (there is
             no scheduler to drain), so no pool rate limit applies here.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from gpufleet.validation.health import CommandOutput, Expectations, NodeData, NodeHealth, evaluate_node

#: Slurm's node reason field; longer reasons are cut (a reason is one line, the finding's head first).
REASON_MAX = 200
GPU_DEVICE = re.compile(r"^/dev/nvidia\d+$")


def _run(argv: Sequence[str], timeout: float = 30) -> CommandOutput:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return CommandOutput(rc=None, stderr=str(e))
    return CommandOutput(rc=p.returncode, stdout=p.stdout, stderr=p.stderr)


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def collect(ns: argparse.Namespace) -> NodeData:
    """The raw outputs the node_validation role collects, read here on the node."""
    fm = _run(["systemctl", "show", "--property=ActiveState,LoadState", ns.fabricmanager_unit])
    props = dict(line.partition("=")[::2] for line in fm.stdout.splitlines())
    if ns.kernel_log_file:
        klog = _read(ns.kernel_log_file) or ""
    else:
        # Only the last interval: an Xid the operator already handled (and resumed the node after) must not
        # drain it again at the next check.
        klog = _run(["journalctl", "-k", "--no-pager", "--since", f"-{ns.kernel_log_since_s}s"]).stdout
    return NodeData(
        host=socket.gethostname().split(".")[0], pool=None,
        nvidia_smi=_run([ns.nvidia_smi, "-q", "-x"]),
        module_version=(_read(ns.module_version_path) or "").strip() or None,
        driver_packages=None,
        fabricmanager_state=props.get("ActiveState") or None,
        fabricmanager_installed=props.get("LoadState") != "not-found",
        modules=_read("/proc/modules"),
        ibstat=None,
        kernel_log="\n".join(ln for ln in klog.splitlines() if "NVRM: Xid" in ln),
    )


def expectations(ns: argparse.Namespace) -> Expectations:
    return Expectations(model=None, driver_version=None, persistence_mode=ns.persistence,
                        gpu_count=ns.gpus, nvswitch=ns.nvswitch)


def finding_text(health: NodeHealth) -> str | None:
    """``gpufleet:<action> check=<check> ...``: the most disruptive critical finding; None when none is."""
    crit = [f for f in health.findings if f.severity == "critical"]
    if not crit:
        return None
    reason = health.drain_reason or f"gpufleet:{crit[0].action.value} check={crit[0].check}"
    # One line for scontrol's reason= (argv, no shell): line breaks would be the only way to break it.
    return " ".join(reason.split())[:REASON_MAX]


def drain_argv(host: str, reason: str, scontrol: str = "scontrol") -> list[str]:
    """One argv element per key: reason= carries spaces and quotes as they are (no shell parses it)."""
    return [scontrol, "update", f"nodename={host}", "state=drain", f"reason={reason}"]


def gpu_holders(proc: Path = Path("/proc")) -> list[tuple[int, str]]:
    """(pid, device) for every process with a /dev/nvidia<N> open (not nvidiactl/nvidia-uvm: the driver's own)."""
    out: list[tuple[int, str]] = []
    for fd_dir in proc.glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if GPU_DEVICE.match(target):
                out.append((int(fd_dir.parent.name), target))
    return sorted(set(out))


def watch(health: NodeHealth, ns: argparse.Namespace) -> int:
    """Plain hosts: the marker and the metrics through gpufleet validate --apply's own code (``actions``).
    Imported here, not above: Slurm's programs never load it (roles/slurm installs only what they import)."""
    from gpufleet.validation.actions import ActionPolicy, MarkerExecutor, run_actions

    state = Path(ns.state_dir)
    result = run_actions([health], {None: 1}, state / "state.json", MarkerExecutor(state / "markers"),
                         ActionPolicy(max_share=1.0, healthy_streak=ns.healthy_streak),
                         metrics=Path(ns.textfile_dir) / "gpufleet_health_actions.prom")
    for item in result["items"]:
        print(f"gpufleet: {item['host']}: {item['decision']} {item['action'] or ''} ({item['why']})".rstrip())
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpufleet-slurm-health", description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["health", "prolog", "epilog", "watch"])
    p.add_argument("--gpus", type=int, default=None, help="GPUs this node must show (slurm.conf's Gres=gpu:N)")
    p.add_argument("--persistence", choices=["on", "off"], default=None)
    p.add_argument("--nvswitch", action="store_true", help="an NVSwitch board: fabric manager must be active")
    p.add_argument("--nvidia-smi", default="nvidia-smi")
    p.add_argument("--scontrol", default="scontrol")
    p.add_argument("--fabricmanager-unit", default="nvidia-fabricmanager.service")
    p.add_argument("--module-version-path", default="/sys/module/nvidia/version")
    p.add_argument("--kernel-log-file", default="")
    p.add_argument("--kernel-log-since-s", type=int, default=600)
    p.add_argument("--no-drain", action="store_true", help="health: print the finding, do not drain")
    p.add_argument("--state-dir", default="/var/lib/gpufleet/health", help="watch: state and markers")
    p.add_argument("--textfile-dir", default="/var/lib/node_exporter/textfile_collector",
                   help="watch: node exporter's textfile directory (gpufleet_health_actions.prom)")
    p.add_argument("--healthy-streak", type=int, default=3, help="watch: healthy checks before the marker goes")
    ns = p.parse_args(argv)
    ns.persistence = None if ns.persistence is None else ns.persistence == "on"
    return ns


def main(argv: Sequence[str] | None = None) -> int:
    ns = parse_args(argv)
    # slurmd runs HealthCheckProgram with an environment of its own making (no PATH): the tools are in these.
    os.environ.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    host = socket.gethostname().split(".")[0]
    if ns.mode == "epilog":
        holders = gpu_holders()
        for pid, dev in holders:
            print(f"gpufleet: pid {pid} still holds {dev} after the job", file=sys.stderr)
        return 1 if holders else 0
    health = evaluate_node(collect(ns), expectations(ns))
    if ns.mode == "watch":
        return watch(health, ns)
    reason = finding_text(health)
    if reason is None:
        return 0
    for f in health.findings:
        if f.severity == "critical":
            print(f"gpufleet: {f.check}: {f.message}", file=sys.stderr)
    if ns.mode == "prolog":
        return 1
    if ns.no_drain:
        print(reason)
        return 1
    r = _run(drain_argv(host, reason, ns.scontrol))
    if r.rc != 0:
        print(f"gpufleet: scontrol could not drain {host}: {(r.stdout + r.stderr).strip()}", file=sys.stderr)
        return 1
    print(f"gpufleet: drained {host}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
