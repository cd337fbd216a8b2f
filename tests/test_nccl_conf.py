"""roles/nccl's /etc/nccl.conf rendered by Ansible itself (the role's facts tasks, the gpu_topology module and the
template) for hosts whose ``nvidia-smi topo -m`` is a real capture: NCCL_IB_HCA lists the HCAs in GPU order."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from tests.ansible_local import local_host, run_playbook

REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "topo"
pytestmark = [pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent"), pytest.mark.slow]

H100 = "h100-80gb-hbm3_x8_nv18_8-nics-pix_driver570.133.20_topo-m_space-separated.txt"
H200 = "h200_x8_nv18_12-nics_spr-56c-numa01_topo-m.txt"
DGXA100 = "dgx-a100_8x-a100-sxm4_nv12_12x-mlx5_nps4-numa1357_topo-m.txt"


def _render(tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "out"
    out.mkdir()
    for name, hv in hosts.items():
        if "matrix" in hv:
            smi = tmp_path / f"nvidia-smi-{name}"
            matrix = hv.pop("matrix")
            body = (f"[ \"$1 $2\" = 'topo -m' ] && exec cat '{REAL / matrix}'\nexit 9" if matrix else
                    "echo 'Failed to initialize NVML: Driver/library version mismatch'\nexit 18")
            smi.write_text(f"#!/bin/sh\n{body}\n")
            smi.chmod(0o755)
            hv["nccl_nvidia_smi"] = str(smi)
    inventory = {"all": {"hosts": {n: local_host(**hv) for n, hv in hosts.items()}, "vars": {"out_dir": str(out)}}}
    return run_playbook(tmp_path, "nccl_conf.yml", inventory), out


def _settings(text: str) -> dict[str, str]:
    return dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))


def test_hcas_in_gpu_order_socket_on_data_network_and_refusals(tmp_path: Path) -> None:
    ib = {"nccl_fabric": "infiniband", "nccl_data_cidr": "127.0.0.0/8", "nccl_management_cidr": "192.0.2.0/24"}
    res, out = _render(tmp_path, {
        "h100": {"matrix": H100, **ib},
        "h200": {"matrix": H200, **ib},
        "a100-roce": {"matrix": DGXA100, **ib, "nccl_fabric": "roce", "nccl_hca_filter": "mlx5"},
        "efa": {"nccl_fabric": "efa"},
        # Broken on purpose: the socket interface sits on the management network.
        "mgmt": {"matrix": H100, **ib, "nccl_socket_ifname": "lo", "nccl_management_cidr": "127.0.0.0/8"},
        # Broken on purpose: the stack's HCA family matches no HCA near a GPU.
        "nohca": {"matrix": H200, **ib, "nccl_hca_filter": "=mlx5_1,mlx5_2"},
        # nvidia-smi fails (a driver/library mismatch until reboot): the file is left as it is, not failed on.
        "mismatch": {"matrix": "", **ib},
    })
    assert res.returncode == 2, res.stdout + res.stderr  # the two broken hosts fail, the others render
    h100 = (out / "h100.conf").read_text()
    rails = ",".join(f"mlx5_{k}" for k in range(8))
    assert _settings(h100) == {"NCCL_IB_HCA": "=" + rails, "NCCL_SOCKET_IFNAME": "=lo"}
    h200 = (out / "h200.conf").read_text()
    # GPU order, not name order: GPU1's nearest HCA is mlx5_3; mlx5_1/2/7/8 (front-end, storage) are left out.
    assert _settings(h200)["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    per_gpu = "GPU0 mlx5_0, GPU1 mlx5_3, GPU2 mlx5_4, GPU3 mlx5_5, GPU4 mlx5_6, GPU5 mlx5_9, GPU6 mlx5_10, GPU7 mlx5_11"
    assert f"({per_gpu};" in h200
    assert "NVSwitch board (NV18 between every GPU pair): NVLS (NVLink SHARP) stays at NCCL's default" in h200
    assert "NCCL_ALGO" not in _settings(h200) and "NCCL_NVLS_ENABLE" not in h200
    # Every setting has a comment line right above it saying why.
    lines = h200.splitlines()
    assert all(lines[i - 1].startswith("#") for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    a100 = _settings((out / "a100-roce.conf").read_text())
    assert a100 == {"NCCL_IB_HCA": "=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9",
                    "NCCL_IB_GID_INDEX": "3", "NCCL_SOCKET_IFNAME": "=lo"}
    efa = (out / "efa.conf").read_text()
    assert _settings(efa) == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}
    assert "NCCL_SOCKET_IFNAME not written: the stack declares no data network" in efa
    assert not (out / "mgmt.conf").exists() and not (out / "nohca.conf").exists()
    assert not (out / "mismatch.conf").exists()
    assert "nccl: /etc/nccl.conf on mismatch left as it is:" in res.stdout
    assert "Driver/library version mismatch" in res.stdout
    assert "selects lo, on the management network 127.0.0.0/8" in res.stdout
    assert "no HCA near a GPU passes nccl_hca_filter==mlx5_1,mlx5_2" in res.stdout


def test_azure_preset_uses_the_topology_file(tmp_path: Path) -> None:
    res, out = _render(tmp_path, {"nd": {"nccl_fabric": "infiniband", "gpufleet_backend": "azure",
                                         "nccl_nvidia_smi": "/nonexistent/nvidia-smi"}})
    assert res.returncode == 0, res.stdout + res.stderr
    assert _settings((out / "nd.conf").read_text()) == {"NCCL_TOPO_FILE": "/opt/microsoft/ndv5-topo.xml"}
