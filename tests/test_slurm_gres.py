"""roles/slurm's gres.conf rendered by Ansible (the gpu_topology module and the role's template) for compute nodes
whose ``nvidia-smi topo -m`` is a real capture."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet import REPO_ROOT
from tests.ansible_local import local_host, run_playbook

REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "topo"
pytestmark = [pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent"), pytest.mark.slow]

H100 = "h100-80gb-hbm3_x8_nv18_8-nics-pix_driver570.133.20_topo-m_space-separated.txt"
RTX = "rtx6000ada_x4_pcie-only_asus-esc8000a-e12_4-nics_topo-m.txt"


def _render(tmp_path: Path, matrix: str, **group: object) -> dict[str, list[str]]:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'topo -m' ] && exec cat '{REAL / matrix}'\nexit 9\n")
    smi.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    inventory = {"all": {"vars": {"out_dir": str(out), "slurm_nvidia_smi": str(smi), **group},
                         "children": {"system": {"hosts": {"ctl": local_host()}},
                                      "gpu": {"hosts": {"gpu-0": local_host(), "gpu-1": local_host()}}}}}
    res = run_playbook(tmp_path, "slurm_gres.yml", inventory)
    assert res.returncode == 0, res.stdout + res.stderr
    return {h: (out / f"{h}.conf").read_text().splitlines() for h in ("ctl", "gpu-0", "gpu-1")}


def _gres(lines: list[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith("NodeName=")]


def test_cores_and_links_per_gpu_on_every_host(tmp_path: Path) -> None:
    layout = "Sockets=2 CoresPerSocket=48 ThreadsPerCore=2"
    files = _render(tmp_path, H100, slurm_node_cpus=192, slurm_node_layout=layout, slurm_gres_threads_per_core=2)
    # Each compute node carries its own lines (slurmd reports them when it registers); the controller none.
    assert _gres(files["ctl"]) == []
    lines = _gres(files["gpu-1"])
    assert len(lines) == 8 and all(ln.startswith("NodeName=gpu-1 ") for ln in lines)
    gpu0 = _gres(files["gpu-0"])[0]
    assert gpu0 == "NodeName=gpu-0 Name=gpu File=/dev/nvidia0 Cores=0-47 Links=-1,18,18,18,18,18,18,18"
    assert lines[4] == "NodeName=gpu-1 Name=gpu File=/dev/nvidia4 Cores=48-95 Links=18,18,18,18,-1,18,18,18"


def test_cores_left_out_with_the_reason_when_slurm_conf_declares_fewer(tmp_path: Path) -> None:
    # The sandbox declares 16 CPUs per node: the real board's core indices (up to 95) would be rejected by slurmd.
    files = _render(tmp_path, H100, slurm_node_cpus=16, slurm_gres_threads_per_core=2)
    assert _gres(files["gpu-0"])[0] == "NodeName=gpu-0 Name=gpu File=/dev/nvidia0 Links=-1,18,18,18,18,18,18,18"
    assert "# Cores= left out: the topology's core indices reach 95, slurm.conf declares 16 cores" in files["gpu-0"]


def test_pcie_board_has_cores_and_no_links(tmp_path: Path) -> None:
    files = _render(tmp_path, RTX, slurm_node_cpus=64, slurm_gpus_per_node=4, slurm_gres_threads_per_core=1)
    assert _gres(files["gpu-0"]) == [f"NodeName=gpu-0 Name=gpu File=/dev/nvidia{i} Cores={c}"
                                        for i, c in enumerate(["0-31", "0-31", "32-63", "32-63"])]
