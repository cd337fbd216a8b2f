"""roles/lustre_client's settings from the stack, by Ansible itself (the role's preflight, variables and LNet
template on the controller): o2ib on InfiniBand pools and tcp otherwise, over the data network's interfaces; the
datasets and checkpoints entries with the MGS NIDs, fsname, sub-directories and explicit options; the refusals
(shared path, MGS on another LNet network, no interface) with the variable, its value and the fix. That a refusal
changes nothing on a host is the Molecule scenario's side effect (molecule/lustre_client)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment

from gpufleet import REPO_ROOT
from tests.ansible_local import local_host, run_playbook

pytestmark = pytest.mark.slow

FS = {"mgs_nids": ["10.0.0.5@o2ib", "10.0.0.6@o2ib"], "fsname": "ai",
      "datasets": {"mount_path": "/lustre/datasets", "subdir": "/datasets"},
      "checkpoints": {"mount_path": "/lustre/checkpoints", "subdir": "/"}}
TCP_FS = {**FS, "mgs_nids": ["192.0.2.5@tcp"]}
SHARED = {**FS, "checkpoints": {"mount_path": "/lustre/datasets", "subdir": "/checkpoints"}}


def _run(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    out.mkdir()
    inventory = {"all": {"hosts": {n: local_host(**{"gpufleet_networks": {"data_cidr": "127.0.0.0/8"}, **hv})
                                   for n, hv in hosts.items()},
                         "vars": {"out_dir": str(out)}}}
    return run_playbook(tmp_path, "lustre_client.yml", inventory), out


def _pool(fabric: str) -> dict[str, Any]:
    return {"gpufleet_pool": "p", "gpufleet_pools": {"p": {"role": "gpu", "fabric": fabric}}}


def _lnet(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_lnet_and_mounts_from_the_stack_and_the_refusals(tmp_path: Path) -> None:
    res, out = _run(tmp_path, {
        "ib": {**_pool("infiniband"), "gpufleet_lustre": FS, "lustre_client_datasets_mount_options": ["ro"]},
        "eth": {**_pool("none"), "gpufleet_lustre": TCP_FS},
        "ib-explicit": {**_pool("infiniband"), "gpufleet_lustre": FS, "lustre_client_lnet_interfaces": ["ib0", "ib1"]},
        "shared-allowed": {**_pool("infiniband"), "gpufleet_lustre": SHARED, "lustre_allow_shared_mount": True},
        # Broken on purpose: one path for both volumes; MGS on o2ib from a tcp pool; no data network, no interface.
        "shared": {**_pool("infiniband"), "gpufleet_lustre": SHARED},
        "wrong-net": {**_pool("roce"), "gpufleet_lustre": FS},
        "no-iface": {**_pool("infiniband"), "gpufleet_lustre": FS, "gpufleet_networks": {}},
    })
    assert res.returncode == 2, res.stdout + res.stderr  # the three broken hosts fail, the others render
    ib = json.loads((out / "ib.json").read_text())
    assert _lnet(ib["lnet"]) == ['options lnet networks="o2ib0(lo)"']
    assert ib["mounts"] == [
        {"volume": "datasets", "path": "/lustre/datasets", "src": "10.0.0.5@o2ib:10.0.0.6@o2ib:/ai/datasets",
         "opts": "_netdev,flock,ro"},
        {"volume": "checkpoints", "path": "/lustre/checkpoints", "src": "10.0.0.5@o2ib:10.0.0.6@o2ib:/ai",
         "opts": "_netdev,flock"}]
    eth = json.loads((out / "eth.json").read_text())
    assert _lnet(eth["lnet"]) == ['options lnet networks="tcp0(lo)"']
    assert "socklnd" in eth["lnet"] and "(the interfaces in the data network 127.0.0.0/8)" in eth["lnet"]
    assert _lnet(json.loads((out / "ib-explicit.json").read_text())["lnet"]) == [
        'options lnet networks="o2ib0(ib0,ib1)"']
    # Allowed: one mount, the datasets' volume.
    assert [m["volume"] for m in json.loads((out / "shared-allowed.json").read_text())["mounts"]] == ["datasets"]
    for broken in ("shared", "wrong-net", "no-iface"):
        assert not (out / f"{broken}.json").exists(), broken
    log = " ".join(res.stdout.split())
    assert ("storage.lustre.datasets.mount_path and storage.lustre.checkpoints.mount_path are both /lustre/datasets"
            in log)
    assert "or set lustre_allow_shared_mount: true in the inventory's group_vars" in log
    assert ("are on LNet network(s) o2ib, but this roce pool's client uses lustre_client_lnet_network=tcp0" in log)
    assert "no interface for LNet (o2ib0) on no-iface" in log and "Fix: set networks.data_cidr" in log


def test_site_runs_the_role_only_for_stacks_with_mgs_nids() -> None:
    # One include per host behind one condition: a stack without Lustre (the local sandbox) skips one task.
    plays = yaml.safe_load((REPO_ROOT / "ansible" / "playbooks" / "node_services.yml").read_text())
    [(play, task)] = [(p, t) for p in plays for t in p.get("tasks") or []
                      if (t.get("ansible.builtin.include_role") or {}).get("name") == "lustre_client"]
    assert play["hosts"] == "gpu:!~^(gpufleet_converged|ungrouped)$" and not play.get("roles")
    assert not play.get("gather_facts")
    when = Environment().compile_expression(task["when"])
    assert when(gpufleet_lustre=None) is False  # local sandbox: storage.lustre absent
    assert when() is False
    assert when(gpufleet_lustre={**FS, "mgs_nids": []}) is False  # aws: FSx, mounted by the CSI driver in pods
    assert when(gpufleet_lustre=FS) is True
