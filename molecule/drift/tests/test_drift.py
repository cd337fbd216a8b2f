"""drift: every perturbation was reported, only the driver change drained its node, and all is back."""

import json
import os
from pathlib import Path

import pytest
from nodestate import driver_packages, installed_version, query_gpus, selection

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
CONTROL, SETTINGS_NODE, DRIVER_NODE = "gpufleet-mol-drift-0", "gpufleet-mol-drift-1", "gpufleet-mol-drift-2"


def _name(host) -> str:
    return host.backend.get_hostname()


def _only(host, *names: str) -> None:
    if _name(host) not in names:
        pytest.skip(f"checked on {', '.join(names)}")


def test_textfile_metric_flags_exactly_the_drifted_components(host):
    _only(host, CONTROL)
    lines = (OUT / "gpufleet_drift.prom").read_text().splitlines()
    flagged = {ln.split("{", 1)[1].split("}")[0] for ln in lines
               if ln.startswith("gpufleet_drift{") and ln.endswith(" 1")}
    assert flagged == {
        f'stack="molecule-drift",host="{SETTINGS_NODE}",component="{c}",severity="normal"'
        for c in ("gpu_settings", "nvidia_driver", "nccl", "host_tuning")
    } | {f'stack="molecule-drift",host="{DRIVER_NODE}",component="nvidia_driver",severity="normal"'}
    assert any(ln.startswith("gpufleet_drift_last_run_timestamp_seconds") for ln in lines)
    after = (OUT / "gpufleet_drift_after.prom").read_text().splitlines()
    assert not [ln for ln in after if ln.startswith("gpufleet_drift{") and ln.endswith(" 1")]


def test_only_the_driver_change_needed_a_drain(host):
    _only(host, CONTROL)
    report = json.loads((OUT / "drift.json").read_text())
    assert report["hosts"][DRIVER_NODE]["needs_drain"] is True
    assert report["hosts"][SETTINGS_NODE]["needs_drain"] is False
    assert report["hosts"][CONTROL]["drifted"] is False
    result = json.loads((OUT / "remediate.json").read_text())
    outcomes = {o["host"]: o for o in result["remediation"]["outcomes"]}
    driver = dict(outcomes[DRIVER_NODE])
    # Where the converge runs roles/slurm on the node, it says that slurm.conf declares another node than the
    # container's slurmd -C finds (the test bed's config_overrides: tasks/config.yml); the run says nothing else.
    from gpufleet.module_utils.slurm_node import NOTICE_EVENT

    assert [n for n in driver.pop("notices") if not n.startswith(f"{NOTICE_EVENT} on {DRIVER_NODE}: ")] == []
    assert driver == {"host": DRIVER_NODE, "drained": True, "ok": True, "resumed": True, "message": ""}
    assert outcomes[SETTINGS_NODE]["drained"] is False and outcomes[SETTINGS_NODE]["ok"] is True
    # --batch 1: one host out of service at a time
    assert all(len(b) == 1 for b in result["remediation"]["batches"])


def test_slurm_drained_the_driver_node_with_the_reason_and_resumed_it(host):
    _only(host, CONTROL)
    log = host.file("/var/log/slurm/slurmctld.log").content_string
    assert f"update_node: node {DRIVER_NODE} reason set to: gpufleet: remediate nvidia_driver" in log
    assert f"update_node: node {DRIVER_NODE} state set to DRAINED" in log or \
        f"update_node: node {DRIVER_NODE} state set to DRAINING" in log
    assert f"update_node: node {SETTINGS_NODE} reason set to" not in log
    states = host.check_output("sinfo --noheader --Node --format '%N %T'").splitlines()
    assert sorted(states) == [f"{SETTINGS_NODE} idle", f"{DRIVER_NODE} idle"]


def test_driver_is_back_at_the_lock_and_held(host):
    _only(host, SETTINGS_NODE, DRIVER_NODE)
    for pkg in driver_packages("570.172.08"):
        assert installed_version(host, pkg) == "570.172.08-0ubuntu1", pkg
        assert selection(host, pkg) == "hold", pkg


def test_nccl_is_back_at_the_lock_and_held(host):
    _only(host, SETTINGS_NODE)
    for pkg in ("libnccl2", "libnccl-dev"):
        assert installed_version(host, pkg) == "2.26.2-1+cuda12.8", pkg
        assert selection(host, pkg) == "hold", pkg


def test_the_weakened_source_was_flagged_security_in_report_and_metric(host):
    _only(host, CONTROL)
    report = json.loads((OUT / "security.json").read_text())
    weak = [i for i in report["items"] if i["severity"] == "security"]
    assert [(i["host"], i["component"]) for i in weak] == [(SETTINGS_NODE, "nvidia_repo")]
    assert report["hosts"][SETTINGS_NODE]["security"] is True
    prom = (OUT / "gpufleet_drift_security.prom").read_text()
    assert (f'gpufleet_drift{{stack="molecule-drift",host="{SETTINGS_NODE}",component="nvidia_repo",'
            'severity="security"} 1') in prom


def test_gpu_settings_are_back(host):
    _only(host, SETTINGS_NODE, DRIVER_NODE)
    gpus = query_gpus(host, "index", "power.limit", "persistence_mode")
    assert {float(g["power.limit"]) for g in gpus} == {700.0}
    assert {g["persistence_mode"] for g in gpus} == {"Enabled"}
    assert host.service("gpufleet-gpu-settings").is_enabled
    assert host.service("nvidia-persistenced").is_running


def test_files_and_sysctls_are_back(host):
    _only(host, SETTINGS_NODE, DRIVER_NODE)
    assert "NCCL_DEBUG=WARN" in host.file("/etc/nccl.conf").content_string
    assert "vm.max_map_count=1048576" in host.file("/etc/sysctl.d/90-gpufleet.conf").content_string


def test_a_node_failing_its_post_check_stayed_drained_with_the_reason(host):
    _only(host, CONTROL)
    result = json.loads((OUT / "remediate-failed.json").read_text())["remediation"]
    assert result["failed"] == [DRIVER_NODE] and result["stopped"].startswith("stopped after 1 failure")
    (outcome,) = result["outcomes"]
    assert outcome["drained"] is True and outcome["resumed"] is False
    assert outcome["message"].startswith("Post-check - the driver answers: Failed to initialize NVML")
    node = (OUT / "failed-node.txt").read_text()
    assert "State=IDLE+DRAIN " in node
    assert "Reason=gpufleet: remediate failed: Post-check - the driver answers: Failed to initialize NVML" in node
