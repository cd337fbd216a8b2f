"""Issue 31 point 2: the health watcher's loop on fakes. Each node is the GPU simulator (testbed/simulator) read
by the node agent's own collection; the Kubernetes API is a small in-memory fake with the API server's
merge-patch and resourceVersion rules (the real API server: tests/test_health_watch_apiserver.py).

A planted fault on one node taints that node (and only it); clearing needs the healthy streak; faults on more
nodes than the rate limit allows act on the allowed count and the held metric (the alert's input) says so."""

from __future__ import annotations

import copy
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.monitoring import RULES_FILE
from gpufleet.sandbox.tools import find_promtool
from gpufleet.validation import node_agent
from gpufleet.validation.actions import HEALTH_ANNOTATION, ActionPolicy
from gpufleet.validation.health import Expectations
from gpufleet.validation.watcher import AGENT_NAME, Watcher

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
POOL = "h100-a"
KEY = "gpufleet.io/gpu-unhealthy"


class FakeApi:
    """Nodes, the agents' pods and Events; GET/PATCH/POST as the taint writer and the watcher use them."""

    def __init__(self, hosts: list[str]) -> None:
        self.nodes: dict[str, dict[str, Any]] = {
            h: {"metadata": {"name": h, "resourceVersion": "1", "labels": {"gpufleet.io/pool": POOL},
                             "annotations": {}},
                "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}}
            for h in hosts}
        self.pods = [{"metadata": {"name": f"agent-{h}", "labels": {"app.kubernetes.io/name": AGENT_NAME,
                                                                     "gpufleet.io/pool": POOL}},
                      "spec": {"nodeName": h}, "status": {"phase": "Running", "podIP": f"10.0.0.{i}"}}
                     for i, h in enumerate(hosts)]
        self.events: list[dict[str, Any]] = []
        self.patches = 0

    def __call__(self, method: str, path: str, body: Any, content_type: str) -> tuple[int, Any]:
        if method == "GET" and path.startswith("/api/v1/namespaces/gpufleet/pods?labelSelector="):
            return 200, {"items": copy.deepcopy(self.pods)}
        if path.startswith("/api/v1/nodes/"):
            node = self.nodes.get(path.rsplit("/", 1)[1])
            if node is None:
                return 404, {"message": "not found"}
            if method == "GET":
                return 200, copy.deepcopy(node)
            if method == "PATCH":
                assert content_type == "application/merge-patch+json"
                if body["metadata"]["resourceVersion"] != node["metadata"]["resourceVersion"]:
                    return 409, {"message": "Conflict"}
                node["metadata"]["annotations"].update(body["metadata"]["annotations"])
                node["spec"]["taints"] = body["spec"]["taints"]
                node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
                self.patches += 1
                return 200, copy.deepcopy(node)
        if method == "POST" and path.endswith("/events"):
            self.events.append(body)
            return 201, body
        return 405, {"message": f"{method} {path}"}

    def health_taints(self) -> dict[str, str]:
        return {h: f"{t['value']}:{t['effect']}" for h, n in self.nodes.items()
                for t in n["spec"]["taints"] if t["key"] == KEY}


class Fleet:
    """Simulated GPU nodes, each with its own simulator root and node agent state (the kernel-log tail)."""

    def __init__(self, tmp: Path, hosts: list[str]) -> None:
        self.tmp = tmp
        self.roots: dict[str, Path] = {}
        self.tails: dict[str, node_agent.KernelLogTail] = {}
        self.down: set[str] = set()
        for h in hosts:
            root = tmp / h
            (root / "etc/gpusim").mkdir(parents=True)
            (root / "usr/lib/gpusim").mkdir(parents=True)
            (root / "run/gpusim").mkdir(parents=True)
            (root / "etc/gpusim/board").write_text("h100-hgx\n")
            (root / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")
            (root / "run/gpusim/kmsg").write_text("")
            self.roots[h] = root
            self.tails[h] = node_agent.KernelLogTail(str(root / "run/gpusim/kmsg"), 3600)
            # Written once, before any check: a script written while another thread forks can fail to run
            # (ETXTBSY: the child holds the write descriptor until its exec), and the controller fetches in parallel.
            smi = tmp / f"nvidia-smi-{h}"
            smi.write_text(f'#!/bin/sh\nGPUSIM_ROOT={root} exec {sys.executable} {GPUSIM} "$@"\n')
            smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
        self.by_ip = {f"10.0.0.{i}": h for i, h in enumerate(hosts)}

    def ctl(self, host: str, *args: str) -> None:
        subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", *args], check=True, timeout=60,
                       env={**os.environ, "GPUSIM_ROOT": str(self.roots[host])}, capture_output=True)

    def fetch(self, url: str) -> Any:
        host = self.by_ip[url.split("//")[1].split(":")[0]]
        if host in self.down:
            raise OSError("connection refused")
        root, smi = self.roots[host], self.tmp / f"nvidia-smi-{host}"
        ns = node_agent.parse_args(["--nvidia-smi", str(smi), "--kernel-log-file", str(root / "run/gpusim/kmsg"),
                                    "--module-version-path", str(root / "run/gpusim/sys/module/nvidia/version")])
        # Through JSON, as over HTTP.
        return json.loads(json.dumps(node_agent.collect(ns, self.tails[host])))


HOSTS = [f"gpu-{i}" for i in range(10)]
EXP = Expectations(model=None, driver_version=None, persistence_mode=None, gpu_count=8)


@pytest.fixture
def world(tmp_path: Path) -> tuple[FakeApi, Fleet, Watcher]:
    api, fleet = FakeApi(HOSTS), Fleet(tmp_path, HOSTS)
    watcher = Watcher(api, fleet.fetch, lambda pool: EXP, {POOL: len(HOSTS)},
                      ActionPolicy(max_share=0.1, healthy_streak=3))
    return api, fleet, watcher


def _metric(text: str, name: str, **labels: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(name + "{")
            and all(f'{k}="{v}"' in ln for k, v in labels.items())]


def test_healthy_fleet_is_left_alone(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, _, watcher = world
    cycle = watcher.once()
    assert api.patches == 0 and api.events == [] and api.health_taints() == {}
    assert _metric(cycle.metrics(), "gpufleet_health_watch_reports", state="ok") == [
        f'gpufleet_health_watch_reports{{pool="{POOL}",state="ok"}} 10']


def test_a_planted_fault_taints_that_node_with_its_action(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-3", "--gpu", "3", "--ecc-dbe-volatile", "1")
    cycle = watcher.once()
    assert api.health_taints() == {"gpu-3": "reset-gpu:NoSchedule"}
    # The pool's taint stays, and the writer's annotation records ours.
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in api.nodes["gpu-3"]["spec"]["taints"]
    assert json.loads(api.nodes["gpu-3"]["metadata"]["annotations"][HEALTH_ANNOTATION])[0]["value"] == "reset-gpu"
    assert [e["involvedObject"]["name"] for e in api.events] == ["gpu-3"]
    assert "check=ecc-dbe" in api.events[0]["message"]
    assert _metric(cycle.metrics(), "gpufleet_health_actions", host="gpu-3", decision="apply", action="reset-gpu")


def test_an_xid_79_reboot_taint_evicts(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    watcher.once()  # the agent started before the Xid: only lines logged after count
    fleet.ctl("gpu-5", "--gpu", "5", "--xid", "79")
    watcher.once()
    assert api.health_taints() == {"gpu-5": "reboot:NoExecute"}


def test_clearing_needs_the_configured_healthy_streak(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-1", "--gpu", "0", "--ecc-dbe-volatile", "2")
    watcher.once()
    assert api.health_taints() == {"gpu-1": "reset-gpu:NoSchedule"}
    fleet.ctl("gpu-1", "--gpu", "0", "--ecc-dbe-volatile", "0")  # the GPU was reset
    for n in (1, 2):
        cycle = watcher.once()
        assert api.health_taints() == {"gpu-1": "reset-gpu:NoSchedule"}, f"cleared after {n} good read(s)"
        assert _metric(cycle.metrics(), "gpufleet_health_actions", host="gpu-1", decision="keep")
    cycle = watcher.once()
    assert api.health_taints() == {}
    assert _metric(cycle.metrics(), "gpufleet_health_actions", host="gpu-1", decision="clear")
    assert [e["reason"] for e in api.events] == ["GpufleetUnhealthy", "GpufleetHealthy"]


def test_a_bad_read_inside_the_streak_starts_it_again(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-2", "--gpu", "1", "--ecc-dbe-volatile", "1")
    watcher.once()
    fleet.ctl("gpu-2", "--gpu", "1", "--ecc-dbe-volatile", "0")
    watcher.once()
    watcher.once()
    fleet.ctl("gpu-2", "--gpu", "1", "--ecc-dbe-volatile", "1")
    watcher.once()
    fleet.ctl("gpu-2", "--gpu", "1", "--ecc-dbe-volatile", "0")
    watcher.once()
    watcher.once()
    assert api.health_taints() == {"gpu-2": "reset-gpu:NoSchedule"}


def test_faults_past_the_rate_limit_act_on_the_allowed_count_and_raise_held(
        world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    for h in ("gpu-4", "gpu-6", "gpu-8"):
        fleet.ctl(h, "--gpu", "2", "--ecc-dbe-volatile", "1")
    cycle = watcher.once()
    # 10 nodes x 10% = 1 node at once: the first by action order and name is tainted, the others held.
    assert api.health_taints() == {"gpu-4": "reset-gpu:NoSchedule"}
    assert {i.host for i in cycle.plan.held} == {"gpu-6", "gpu-8"}
    assert _metric(cycle.metrics(), "gpufleet_health_actions_held", pool=POOL) == [
        f'gpufleet_health_actions_held{{pool="{POOL}"}} 2']
    # Still held on the next cycle: the budget is in use while gpu-4 carries its taint.
    assert len(watcher.once().plan.held) == 2 and len(api.health_taints()) == 1


def test_a_node_without_a_report_is_not_healthy_and_keeps_its_share(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-7", "--gpu", "0", "--ecc-dbe-volatile", "1")
    watcher.once()
    fleet.down.add("gpu-7")  # rebooting, or its agent gone
    fleet.ctl("gpu-9", "--gpu", "0", "--ecc-dbe-volatile", "1")
    for _ in range(4):
        cycle = watcher.once()
    assert api.health_taints() == {"gpu-7": "reset-gpu:NoSchedule"}
    assert [i.host for i in cycle.plan.held] == ["gpu-9"]
    assert _metric(cycle.metrics(), "gpufleet_health_watch_reports", state="missing") == [
        f'gpufleet_health_watch_reports{{pool="{POOL}",state="missing"}} 1']


def test_a_restarted_controller_reads_what_is_applied_from_the_node(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-0", "--gpu", "0", "--ecc-dbe-volatile", "1")
    watcher.once()
    fleet.ctl("gpu-0", "--gpu", "0", "--ecc-dbe-volatile", "0")
    fleet.ctl("gpu-1", "--gpu", "0", "--ecc-dbe-volatile", "1")
    fresh = Watcher(api, fleet.fetch, lambda pool: EXP, {POOL: len(HOSTS)}, ActionPolicy(0.1, 3))
    cycle = fresh.once()
    # gpu-0's taint is known (not cleared on one good read), and it still uses the pool's one slot.
    assert api.health_taints() == {"gpu-0": "reset-gpu:NoSchedule"}
    assert [i.host for i in cycle.plan.held] == ["gpu-1"]


def test_the_node_is_the_pods_not_what_the_report_claims(world: tuple[FakeApi, Fleet, Watcher]) -> None:
    api, fleet, watcher = world
    fleet.ctl("gpu-3", "--gpu", "3", "--ecc-dbe-volatile", "1")
    real = fleet.fetch

    def lying(url: str) -> Any:
        bundle = real(url)
        bundle["host"] = "gpu-0"
        return bundle

    watcher.fetch = lying
    watcher.once()
    assert api.health_taints() == {"gpu-3": "reset-gpu:NoSchedule"}


def test_fabric_state_from_nvidia_smi() -> None:
    ok = "<gpu><fabric>\n<state>Completed</state>\n<status>Success</status></fabric></gpu>" * 2
    assert node_agent.fabric_state(ok) == "active"
    bad = ok + "<gpu><fabric><state>In Progress</state><status>N/A</status></fabric></gpu>"
    assert node_agent.fabric_state(bad) == "fabric In Progress (N/A)"
    assert node_agent.fabric_state("<gpu><fabric><state>N/A</state><status>N/A</status></fabric></gpu>") is None


def test_kernel_log_tail_counts_new_xid_lines_once_per_window(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("Dec  4 07:00:00 n kernel: NVRM: Xid (PCI:0000:1b:00): 79, old\n")
    now = [1000.0]
    tail = node_agent.KernelLogTail(str(log), 600, clock=lambda: now[0])
    assert tail.read() == []  # logged before the agent started
    with log.open("a") as f:
        f.write("Dec  4 07:10:00 n kernel: other\nDec  4 07:10:01 n kernel: NVRM: Xid (PCI:0000:1b:00): 48, new\n"
                "Dec  4 07:10:02 n kernel: NVRM: Xid (PCI:0000:1b:00): 31, half a li")
    assert [ln[-7:] for ln in tail.read()] == ["48, new"]
    now[0] += 601
    assert tail.read() == []  # out of the window
    log.unlink()
    log.write_text("Dec  4 08:00:00 n kernel: NVRM: Xid (PCI:0000:1b:00): 94, rotated\n")
    assert [ln[-11:] for ln in tail.read()] == ["94, rotated"]


def test_the_controller_refuses_an_unknown_stack_with_one_line(capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.validation import watcher

    assert watcher.main(["--stack", "no-such-stack", "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("gpufleet health controller: ") and "Traceback" not in err
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert watcher.main(["--stack", "onprem-h100", "--once"]) == 1
    err = capsys.readouterr().err
    assert "not in a pod with a ServiceAccount token" in err and "Traceback" not in err


@pytest.mark.skipif(find_promtool() is None and not os.environ.get("CI"), reason="promtool not found")
def test_faults_past_the_rate_limit_raise_the_held_alert_from_the_watchers_own_metrics(
        world: tuple[FakeApi, Fleet, Watcher], tmp_path: Path) -> None:
    """The cycle's /metrics text, as Prometheus would scrape it, through the shipped rules (promtool)."""
    _, fleet, watcher = world
    for h in ("gpu-4", "gpu-6"):
        fleet.ctl(h, "--gpu", "2", "--ecc-dbe-volatile", "1")
    text = watcher.once().metrics()
    series = [{"series": ln.rsplit(" ", 1)[0], "values": f"{ln.rsplit(' ', 1)[1]}x10"}
              for ln in text.splitlines() if ln and not ln.startswith("#")
              and not ln.startswith("gpufleet_health_watch_last_cycle")]
    tests = {"rule_files": [str(RULES_FILE)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "5m", "alertname": "GpufleetHealthActionsHeld", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "action": "review", "pool": POOL},
                "exp_annotations": {
                    "summary": f"1 unhealthy node(s) of pool {POOL} held back by the rate limit",
                    "description": f"gpufleet validate --apply found more unhealthy nodes in pool {POOL} than its "
                                   "rate limit lets it act on; look for a fleet-wide cause before raising "
                                   "--max-share."}}]},
            {"eval_time": "5m", "alertname": "GpufleetHealthReportsMissing", "exp_alerts": []}]}]}
    f = tmp_path / "held-tests.yml"
    f.write_text(json.dumps(tests))
    done = subprocess.run([str(find_promtool() or "promtool"), "test", "rules", str(f)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
