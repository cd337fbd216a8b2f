"""Drift names what moved in the fabric and host settings of issue 15: a changed nccl.conf line, an unloaded
nvidia-peermem, a changed CPU governor, each by name, in the report gpufleet drift prints.

The nccl.conf result is the Molecule drift scenario's recorded check run (tests/fixtures/drift/check.jsonl: the
NCCL_DEBUG line edited on the host). The cpu_governor result is the project's module run in check mode on a
stand-in cpufreq tree whose cpu4-7 were set to powersave; the kernel_module result is the project's module run in
check mode on a stand-in modules list without nvidia_peermem (rdma's task; both results as the modules returned
them, temp paths scrubbed). The community.general.modprobe result (a user's own role) has that module's shape (its
``result`` property: changed, name, params, state): this machine has neither modprobe nor /proc/modules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpufleet.ansible_run import build_result
from gpufleet.ansible_run.recording import read_events
from gpufleet.drift import EXIT_DRIFTED, RawResults, build_report, render_text

FIXTURES = Path(__file__).parent / "fixtures" / "drift"
HOST = "gpufleet-mol-drift-1"

#: What cpu_governor returned in check mode (recorded; the temp path scrubbed).
GOVERNOR_RES: dict[str, Any] = {
    "_ansible_no_log": False, "changed": True, "cpus": 8, "governor": "performance", "present": True,
    "differing": {"cpu4": "powersave", "cpu5": "powersave", "cpu6": "powersave", "cpu7": "powersave"},
    "invocation": {"module_args": {"apply": True, "governor": "performance", "sysfs": "{tmp}/cpu"}},
}
#: What kernel_module returned in check mode (recorded; the temp path scrubbed).
KERNEL_MODULE_RES: dict[str, Any] = {
    "_ansible_no_log": False, "changed": True, "loaded": False, "name": "nvidia_peermem", "present": True,
    "state": "present",
    "invocation": {"module_args": {"load": False, "modules_file": "{tmp}/modules", "name": "nvidia_peermem"}},
}
#: community.general.modprobe in check mode on a host where nvidia_peermem is not loaded.
MODPROBE_RES: dict[str, Any] = {
    "_ansible_no_log": False, "changed": True, "name": "nvidia_peermem", "params": "", "state": "present",
    "invocation": {"module_args": {"name": "nvidia_peermem", "params": "", "persistent": "disabled",
                                   "state": "present"}},
}


def _event(role: str, task: str, action: str, res: dict[str, Any], uuid: str, tags: list[str]) -> dict[str, Any]:
    return {"event": "runner_on_ok", "event_data": {
        "host": HOST, "play": "Converge - GPU nodes", "role": role, "task": task, "task_action": action,
        "resolved_action": action, "task_path": f"{{project}}/roles/{role}/tasks/main.yml:1", "task_uuid": uuid,
        "task_tags": {"tags": tags, "task_uuid": uuid}, "res": res}}


def _events() -> list[dict[str, Any]]:
    recorded = read_events(FIXTURES / "check.jsonl")
    nccl = [e for e in recorded if e["event"] == "runner_on_ok"
            and e["event_data"].get("task") == "Write the NCCL configuration"
            and e["event_data"].get("host") == HOST]
    assert len(nccl) == 1
    return [
        *nccl,
        _event("rdma", "Load nvidia-peermem now", "kernel_module", KERNEL_MODULE_RES, "uuid-r1",
               ["rdma", "modules"]),
        _event("host_tuning", "Set the CPU governor now where it differs", "cpu_governor", GOVERNOR_RES, "uuid-h1",
               ["host_tuning", "cpu"]),
        {"event": "playbook_on_stats", "event_data": {
            "changed": {HOST: 3}, "dark": {}, "failures": {}, "ignored": {}, "ok": {HOST: 3},
            "processed": {HOST: 1}, "rescued": {}, "skipped": {}}},
    ]


def test_each_is_named_in_the_report() -> None:
    events = _events()
    raw = RawResults()
    for e in events:
        raw(e)
    report = build_report(build_result(events, rc=0, status="successful", check=True), raw)
    assert [(i.component, i.kind, i.message) for i in report.items] == [
        ("nccl", "file", "/etc/nccl.conf: NCCL_DEBUG INFO -> WARN"),
        ("rdma", "kernel_module", "kernel module nvidia_peermem: not loaded, expected loaded"),
        ("host_tuning", "cpu_governor", "CPU governor powersave on cpu4-7 (4 of 8 CPUs), expected performance"),
    ]
    assert report.exit_code == EXIT_DRIFTED
    text = render_text(report)
    for needle in ("NCCL_DEBUG INFO -> WARN", "nvidia_peermem: not loaded", "CPU governor powersave on cpu4-7"):
        assert needle in text
    # --json carries the same lines
    assert json.dumps([i.to_json() for i in report.items]).count("nvidia_peermem") == 1


def test_governor_groups_cpus_by_the_governor_they_had() -> None:
    from gpufleet.ansible_run import TaskResult
    from gpufleet.drift.messages import messages

    res = {**GOVERNOR_RES, "cpus": 4, "differing": {"cpu0": "ondemand", "cpu2": "powersave", "cpu3": "powersave"}}
    task = TaskResult(host=HOST, play="p", role="host_tuning", task="t", action="cpu_governor", status="changed",
                      changed=True, res=res)
    assert messages(task)[:2] == ("cpu_governor", [
        "CPU governor ondemand on cpu0 (1 of 4 CPUs); powersave on cpu2,3 (2 of 4 CPUs), expected performance"])
    load = TaskResult(host=HOST, play="p", role="mine", task="t", action="community.general.modprobe",
                      status="changed", changed=True, res=MODPROBE_RES)
    assert messages(load)[:2] == ("kernel_module", ["kernel module nvidia_peermem: not loaded, expected loaded"])
    unload = TaskResult(host=HOST, play="p", role="mine", task="t", action="community.general.modprobe",
                        status="changed", changed=True, res={**MODPROBE_RES, "state": "absent"})
    assert messages(unload)[1] == ["kernel module nvidia_peermem: loaded, expected unloaded"]
