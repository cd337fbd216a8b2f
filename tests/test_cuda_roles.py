"""cuda_toolkit, cudnn and nccl: the compatibility data the roles read (the generated layer) follows gpufleet.lock's
rules, and their preflights reject what the lock's rules reject (run for real with ansible-playbook on localhost,
nothing installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.lock.compat import cudnn_cuda_majors
from gpufleet.lock.versions import vtuple
from testbed.fixture_repo.catalogue import CUDNN

ROLES = REPO_ROOT / "roles"


def _layer() -> dict[str, Any]:
    data = yaml.safe_load((ROLES / "gpufleet_defaults" / "defaults" / "main.yml").read_text())
    assert isinstance(data, dict)
    return data


CUDNN_SAMPLES = sorted({v for vs in CUDNN.values() for v in vs} | {"9.0.0.312", "9.10.2.21", "9.11.0.98", "9.12.0.46"})


@pytest.mark.parametrize("cudnn", CUDNN_SAMPLES)
@pytest.mark.parametrize("major", [11, 12, 13])
def test_cudnn_build_rule_equals_the_lock_rule(cudnn: str, major: int) -> None:
    entry = _layer()["gpufleet_compat"]["cudnn9_cuda_majors"].get(str(major), {})
    first, dropped = entry.get("first"), entry.get("end") or None
    built = first is not None and vtuple(cudnn) >= vtuple(first)
    role_says = built and (dropped is None or vtuple(cudnn) < vtuple(dropped))
    assert role_says == (major in cudnn_cuda_majors(cudnn))


def _preflight(role: str, extra: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Preflight only",
        "hosts": "localhost",
        "gather_facts": False,
        "connection": "local",
        "tasks": [{"name": "Preflight", "ansible.builtin.include_role": {"name": role, "tasks_from": "preflight.yml"}}],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible" / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(REPO_ROOT / ".collections"), ANSIBLE_FACT_CACHING="memory",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(playbook),
           "-e", json.dumps(extra)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)


DRIVER = {"nvidia_driver_version": "570.172.08"}

# (role, extra vars, None when the preflight passes, else a piece of the failure message)
CASES: list[tuple[str, dict[str, Any], str | None]] = [
    ("cuda_toolkit", {**DRIVER, "cuda_toolkit_extra_versions": ["12.4.1"]}, None),
    ("cuda_toolkit", {"nvidia_driver_version": "550.163.01"},
     "CUDA 12.8.1 (from cuda_toolkit_version) needs driver >= 570.124.06"),
    ("cuda_toolkit", {"nvidia_driver_version": "570.26.00", "cuda_toolkit_version": "12.8.0"}, None),
    ("cuda_toolkit", {"nvidia_driver_version": "550.163.01", "cuda_toolkit_compat": "minor-version"}, None),
    ("cuda_toolkit", {**DRIVER, "cuda_toolkit_extra_versions": ["13.0.2"]},
     "CUDA 13.0.2 (from cuda_toolkit_extra_versions) needs driver >= 580.95.05"),
    ("cuda_toolkit", {**DRIVER, "cuda_toolkit_version": "12.7.0"}, "is not in the known strict compatibility table"),
    ("cuda_toolkit", {**DRIVER, "cuda_toolkit_extra_versions": ["12.8.0"]}, "at most one per CUDA minor"),
    ("cuda_toolkit", {"cuda_toolkit_driver_version": ""}, "cuda_toolkit_driver_version= (the driver the hosts run"),
    ("cudnn", {"cuda_toolkit_version": "12.8.1"}, None),
    ("cudnn", {"cuda_toolkit_version": "12.8.1", "cudnn_cuda_major": 13, "cudnn_version": "9.13.0.50"},
     "cuDNN must be the build for the toolkit's CUDA major (12)"),
    ("cudnn", {"cuda_toolkit_version": "13.0.2", "cudnn_version": "9.10.2.21"},
     "has a CUDA 13 build only from 9.12.0"),
    ("nccl", {"cuda_toolkit_version": "12.8.1", "nccl_conf": {"NCCL_DEBUG": "WARN"}}, None),
    # NCCL_IB_HCA comes from the node's topology (or nccl_ib_hca), never a second copy in nccl_conf.
    ("nccl", {"cuda_toolkit_version": "12.8.1", "nccl_conf": {"NCCL_IB_HCA": "=mlx5_0"}}, "come from the topology"),
    ("nccl", {"cuda_toolkit_version": "12.9.1"}, "is built for CUDA 12.8, but the toolkit is 12.9.1"),
    ("nccl", {"cuda_toolkit_version": "12.9.1", "nccl_allow_older_cuda_build": True}, None),
    ("nccl", {"cuda_toolkit_version": "12.9.1", "nccl_allow_older_cuda_build": True,
              "nccl_version": "2.28.3-1+cuda13.0"}, "is built for CUDA 13.0"),
    ("nccl", {"cuda_toolkit_version": "12.8.1", "nccl_conf": {"ib_hca": "mlx5"}}, "a dict of NCCL_* names"),
    # Every package role's preflight passes on the generated layer's defaults alone (standalone run).
    ("nvidia_container_toolkit", {}, None),
    ("dcgm", {}, None),
]


@pytest.mark.slow
@pytest.mark.parametrize(("role", "extra", "error"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_preflight(role: str, extra: dict[str, Any], error: str | None, tmp_path: Path) -> None:
    r = _preflight(role, extra, tmp_path)
    out = " ".join((r.stdout + r.stderr).split())
    if error is None:
        assert r.returncode == 0, out
    else:
        assert r.returncode != 0, f"preflight passed: {out}"
        assert error in out, out
