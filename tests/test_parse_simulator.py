"""The GPU simulator's ``nvidia-smi -q -x`` parses to the values the simulator was set to."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.parsers.smi_xml import parse_smi_xml
from gpufleet.validation.xid import Action, parse_kernel_log

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
pytestmark = pytest.mark.skipif(not GPUSIM.exists(), reason="testbed/simulator/gpusim.py is not there yet")


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    (tmp_path / "etc/gpusim").mkdir(parents=True)
    (tmp_path / "usr/lib/gpusim").mkdir(parents=True)
    (tmp_path / "etc/gpusim/board").write_text("h100-hgx\n")
    (tmp_path / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")
    env = {**os.environ, "GPUSIM_ROOT": str(tmp_path), "GPUSIM_HOSTNAME": "gpu-a-0"}

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, str(GPUSIM), *args], env=env, capture_output=True, text=True,
                              check=True, timeout=60)
        return done.stdout

    run.root = tmp_path  # type: ignore[attr-defined]
    return run


def test_sim_xml_matches_injected_state(sim: Any) -> None:
    sim("--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "2", "--xid", "48")
    sim("--gpusim-ctl", "set", "--gpu", "0", "--throttle", "hw_slowdown,sw_thermal_slowdown", "--temp", "91",
        "--util", "100", "--power-draw", "650")
    sim("--gpusim-ctl", "set", "--gpu", "2", "--remapped-unc", "1", "--remap-pending", "yes")
    sim("-pl", "500", "-i", "1")
    state = json.loads(sim("--gpusim-ctl", "show"))["gpus"]
    report = parse_smi_xml(sim("-q", "-x"))

    assert report.driver_version == "570.172.08"
    assert len(report.gpus) == 8
    for gpu in report.gpus:
        st = state[str(gpu.index)]
        assert gpu.name == "NVIDIA H100 80GB HBM3"
        assert gpu.power_limit_w == float(st["power_limit"])
        assert gpu.power_draw_w == float(st["power_draw"])
        assert gpu.temperature_c == float(st["temperature"])
        assert gpu.utilization_gpu_pct == float(st["utilization"])
        assert gpu.ecc_dbe_volatile == st["ecc_dbe_volatile"]
        assert gpu.ecc_dbe_aggregate == st["ecc_dbe_aggregate"]
        assert gpu.throttle_reasons == st["throttle"]
        assert gpu.remapped_rows is not None
        assert gpu.remapped_rows.pending is st["remap_pending"]
        assert gpu.persistence_mode is bool(st["pm"])
    assert report.gpus[1].power_limit_w == 500.0
    assert report.gpus[0].throttle_reasons == ["hw_slowdown", "sw_thermal_slowdown"]
    assert report.gpus[3].ecc_dbe_volatile == 2
    assert report.gpus[2].remapped_rows is not None and report.gpus[2].remapped_rows.pending is True

    [event] = parse_kernel_log((sim.root / "run/gpusim/kmsg").read_text())
    bus = report.gpus[3].pci_bus_id
    assert bus is not None
    assert (event.code, event.pci_bus_id, event.process, event.action) == (
        48, bus.removeprefix("0000").lower(), "gpusim", Action.RESET_GPU)
