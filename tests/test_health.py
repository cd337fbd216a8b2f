"""Health checks (gpufleet.validation.health) on simulator XML, real captures and real ibstat outputs."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.catalog import get_gpu
from gpufleet.lock import load_lock
from gpufleet.parsers.smi_xml import RemappedRows, parse_smi_xml
from gpufleet.topology import build_board, parse_topo_m, render_topo_m
from gpufleet.validation.health import (
    CommandOutput,
    Expectations,
    NodeAction,
    NodeData,
    check_memory,
    check_pcie,
    evaluate_node,
    installed_driver_versions,
)
from gpufleet.validation.run import evaluate, expectations_for, inventory_hosts
from testbed.fixture_repo.simulator import topo_files

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real"
needs_shared = pytest.mark.skipif(not REAL.is_dir(), reason=f"reference data {REAL} is absent")
DRIVER = "570.172.08"
H100 = get_gpu("h100-sxm5-80gb")
EXP = Expectations(model=H100, driver_version=DRIVER, power_limit_w=700.0)
PKGS = (f"nvidia-driver-570-open|{DRIVER}-0ubuntu1|hi \nlibnvidia-compute-570|{DRIVER}-0ubuntu1|hi \n"
        "nvidia-driver-570||un \n")


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    (tmp_path / "etc/gpusim").mkdir(parents=True)
    (tmp_path / "usr/lib/gpusim").mkdir(parents=True)
    (tmp_path / "etc/gpusim/board").write_text("h100-hgx\n")
    (tmp_path / "usr/lib/gpusim/driver-version").write_text(f"{DRIVER}\n")
    for dest, text in topo_files().items():  # what the nvidia-utils package installs
        (tmp_path / dest.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / dest.lstrip("/")).write_bytes(text)
    env = {**os.environ, "GPUSIM_ROOT": str(tmp_path), "GPUSIM_HOSTNAME": "gpu-a-0"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(GPUSIM), *args], env=env, capture_output=True, text=True,
                              check=False, timeout=60)

    run("--gpusim-ctl", "set", "--persistence", "1")
    run.root = tmp_path  # type: ignore[attr-defined]
    return run


def bundle(sim: Any, **over: Any) -> dict[str, Any]:
    """A bundle shaped as roles/node_validation/tasks/collect.yml assembles it, from the simulator."""
    smi = sim("-q", "-x")
    topo = sim("topo", "-m")
    kmsg = sim.root / "run/gpusim/kmsg"
    data: dict[str, Any] = {
        "schema": 1, "host": "gpu-a-0", "pool": "h100-a",
        "nvidia_smi": {"rc": smi.returncode, "stdout": smi.stdout, "stderr": smi.stderr},
        "module_version": {"present": True, "content": DRIVER + "\n"},
        "driver_packages": {"rc": 0, "stdout": PKGS},
        "fabricmanager": {"state": "active", "load_state": "loaded"},
        "modules": "nvidia_peermem 16384 0 - Live 0x0\nnvidia 1234 1 nvidia_peermem, Live 0x0\n",
        "ibstat": {"present": False},
        "topo": {"rc": topo.returncode, "stdout": topo.stdout, "stderr": topo.stderr},
        "kernel_log": {"source": "/run/gpusim/kmsg",
                       "lines": kmsg.read_text().splitlines() if kmsg.exists() else []},
    }
    data.update(over)
    return data


def found(health: Any) -> set[tuple[str, int | None, str, str]]:
    return {(f.check, f.gpu, f.severity, f.action.value) for f in health.findings}


def test_healthy_simulated_node_has_no_finding(sim: Any) -> None:
    health = evaluate_node(NodeData.from_bundle(bundle(sim)), EXP)
    assert health.findings == []
    assert (health.status, health.gpus, health.driver, health.action, health.taint) == ("ok", 8, DRIVER, None, None)


def test_dbe_and_xid_79_on_gpu_3(sim: Any) -> None:
    sim("--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "1", "--xid", "79")
    health = evaluate_node(NodeData.from_bundle(bundle(sim)), EXP)
    assert found(health) == {("ecc-dbe", 3, "critical", "reset-gpu"), ("xid-79", 3, "critical", "reboot")}
    assert health.action is NodeAction.REBOOT and health.xid_events == 1
    taint = health.taint
    assert taint is not None and (taint.key, taint.value, taint.effect) == (
        "gpufleet.io/gpu-unhealthy", "reboot", "NoExecute")
    bus = parse_smi_xml(sim("-q", "-x").stdout).gpus[3].pci_bus_id
    xid79 = "xid=79(ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)"
    assert health.drain_reason == f"gpufleet:reboot check=xid-79 {xid79} gpu={bus}"
    dbe = next(f for f in health.findings if f.check == "ecc-dbe")
    assert dbe.drain_reason == f"gpufleet:reset-gpu check=ecc-dbe gpu={bus}"
    assert dbe.to_json()["taint"] == "gpufleet.io/gpu-unhealthy=reset-gpu:NoSchedule"


def test_app_error_xid_is_a_warning_without_taint(sim: Any) -> None:
    sim("--gpusim-ctl", "set", "--gpu", "1", "--xid", "13")
    sim("--gpusim-ctl", "set", "--gpu", "1", "--xid", "13")
    health = evaluate_node(NodeData.from_bundle(bundle(sim)), EXP)
    assert found(health) == {("xid-13", 1, "warning", "app-error")}
    assert "x2" in health.findings[0].message
    assert health.status == "warning" and health.taint is None and health.drain_reason is None


def test_remap_pending_throttle_and_power(sim: Any) -> None:
    sim("--gpusim-ctl", "set", "--gpu", "2", "--remapped-unc", "1", "--remap-pending", "yes")
    sim("--gpusim-ctl", "set", "--gpu", "0", "--throttle", "hw_slowdown", "--util", "100")
    sim("--gpusim-ctl", "set", "--gpu", "5", "--throttle", "sw_thermal_slowdown", "--temp", "92", "--util", "100")
    sim("-i", "6", "-pl", "500")
    sim("--gpusim-ctl", "set", "--gpu", "7", "--persistence", "0")
    health = evaluate_node(NodeData.from_bundle(bundle(sim)), EXP)
    assert found(health) == {
        ("row-remap-pending", 2, "critical", "reset-gpu"),
        ("hw-slowdown", 0, "critical", "isolate"),
        ("thermal", 5, "warning", "monitor"),
        ("power-limit", 6, "warning", "remediate"),
        ("persistence", 7, "warning", "remediate"),
    }
    assert health.action is NodeAction.ISOLATE
    assert health.findings[0].check == "hw-slowdown"  # most disruptive first
    assert "92 C" in next(f.message for f in health.findings if f.check == "thermal")


def test_memory_checks_without_simulator_support() -> None:
    gpu = parse_smi_xml((REAL / "nvidia-smi-xml/a100-sxm4-80gb_driver535.54.03_mig-enabled_telegraf.xml")
                        .read_text()).gpus[0] if REAL.is_dir() else None
    if gpu is None:
        pytest.skip("reference data absent")
    assert check_memory(gpu) == []
    broken = dataclasses.replace(gpu, ecc_mode="Disabled", remapped_rows=RemappedRows(pending=False, failure=True),
                                 retired_pages_pending=True)
    assert {(f.check, f.action.value) for f in check_memory(broken)} == {
        ("ecc-mode", "reset-gpu"), ("row-remap-failure", "isolate"), ("retired-pages", "reset-gpu")}


@needs_shared
def test_pcie_idle_downshift_is_info_and_narrow_link_a_warning() -> None:
    a10g = parse_smi_xml((REAL / "nvidia-smi-xml/a10g_driver515.105.01_telegraf.xml").read_text()).gpus[0]
    assert (a10g.pcie_gen_current, a10g.pcie_gen_max, a10g.pcie_width_current, a10g.pcie_width_max) == (1, 4, 8, 16)
    assert {(f.check, f.severity) for f in check_pcie(a10g)} == {("pcie-gen", "info"), ("pcie-width", "warning")}
    busy = dataclasses.replace(a10g, throttle_reasons=[], utilization_gpu_pct=97.0, pcie_width_current=16)
    assert {(f.check, f.severity) for f in check_pcie(busy)} == {("pcie-gen", "warning")}
    # K80 capture: GPUs 0/1 busy at gen 3 of 3, GPUs 2/3 idle at gen 1 of 3 (downshifted, info only).
    k80 = parse_smi_xml((REAL / "nvidia-smi-xml/tesla-k80_x4_driver430.26_cuda-not-found_pai.xml").read_text())
    assert [[(f.check, f.severity) for f in check_pcie(g)] for g in k80.gpus] == [
        [], [], [("pcie-gen", "info")], [("pcie-gen", "info")]]


def test_driver_skew_and_pending_reboot(sim: Any) -> None:
    other = PKGS.replace(DRIVER, "570.133.20")
    health = evaluate_node(NodeData.from_bundle(bundle(sim, driver_packages={"rc": 0, "stdout": other})), EXP)
    assert ("driver-lock", None, "critical", "remediate") in found(health)
    assert ("driver-loaded", None, "critical", "reboot") in found(health)  # module 570.172.08 != 570.133.20
    mixed = PKGS + "nvidia-utils-570|570.133.20-0ubuntu1|ii \n"
    health = evaluate_node(NodeData.from_bundle(bundle(sim, driver_packages={"rc": 0, "stdout": mixed})), EXP)
    assert "several versions" in health.findings[0].message


def test_nvml_failure_is_critical_reboot(sim: Any) -> None:
    b = bundle(sim, nvidia_smi={"rc": 18, "stdout": "Failed to initialize NVML: Driver/library version mismatch\n",
                                "stderr": ""},
               module_version={"present": True, "content": "570.133.20\n"})
    health = evaluate_node(NodeData.from_bundle(b), EXP)
    assert found(health) == {("nvml", None, "critical", "reboot"), ("driver-loaded", None, "critical", "reboot")}
    assert "version mismatch" in health.findings[0].message + health.findings[1].message


def test_missing_gpu_and_fabric_manager(sim: Any) -> None:
    xml = sim("-q", "-x").stdout
    first = xml.index("<gpu id=")
    second = xml.index("<gpu id=", first + 1)
    seven = xml[:first] + xml[second:]
    b = bundle(sim, nvidia_smi={"rc": 0, "stdout": seven, "stderr": ""},
               fabricmanager={"state": "inactive", "load_state": "not-found"})
    health = evaluate_node(NodeData.from_bundle(b), EXP)
    assert found(health) == {("gpu-count", None, "critical", "reboot"),
                             ("fabric-manager", None, "critical", "remediate")}
    assert "not installed" in next(f.message for f in health.findings if f.check == "fabric-manager")
    pcie = Expectations(model=get_gpu("l40s"), driver_version=DRIVER, gpu_count=8)
    fm = [f for f in evaluate_node(NodeData.from_bundle(b), pcie).findings if f.check == "fabric-manager"]
    assert fm == []  # no NVSwitch, no fabric manager needed


@needs_shared
@pytest.mark.parametrize(("fixture", "fabric", "expected"), [
    ("ibstat_h100_cx7-MT4129_fw28.41.1000_ndr400_all-active.txt", "infiniband", set()),
    # Its down ports are all Ethernet: the InfiniBand fabric is fine, a RoCE fabric on those HCAs is not.
    ("ibstat_h100_MT4129-MT4125_mixed-ib-eth_fw28.39.1002_some-ports-down.txt", "infiniband", set()),
    ("ibstat_h100_MT4129-MT4125_mixed-ib-eth_fw28.39.1002_some-ports-down.txt", "roce",
     {("ib-port", None, "critical", "isolate")}),
    ("ibstat_a100-azure-ndv4_cx6-vf-MT4124_fw20.41.1000_hdr200_ibpanic-exit255.txt", "infiniband",
     {("ib-port", None, "warning", "monitor")}),
])
def test_infiniband_ports(sim: Any, fixture: str, fabric: str, expected: set[Any]) -> None:
    text = (REAL / "ib" / fixture).read_text()
    rc = 255 if "ibpanic" in fixture else 0
    b = bundle(sim, ibstat={"present": True, "rc": rc, "stdout": text, "stderr": ""})
    exp = dataclasses.replace(EXP, fabric=fabric, ib_hca="mlx5")
    assert found(evaluate_node(NodeData.from_bundle(b), exp)) == expected


@needs_shared
def test_infiniband_port_detail_and_expected_rate(sim: Any) -> None:
    text = (REAL / "ib/ibstat_h100_MT4129-MT4125_mixed-ib-eth_fw28.39.1002_some-ports-down.txt").read_text()
    b = bundle(sim, ibstat={"present": True, "rc": 0, "stdout": text, "stderr": ""})
    exp = dataclasses.replace(EXP, fabric="roce", ib_hca="=mlx5_1,mlx5_2,mlx5_7,mlx5_8")
    msgs = sorted(f.message for f in evaluate_node(NodeData.from_bundle(b), exp).findings)
    assert [m.split(":")[0] for m in msgs] == ["mlx5_2/1", "mlx5_7/1", "mlx5_8/1"]
    assert all("Down/Disabled, expected Active/LinkUp" in m for m in msgs)
    exp = dataclasses.replace(EXP, fabric="infiniband")
    ok = (REAL / "ib/ibstat_h100_cx7-MT4129_fw28.41.1000_ndr400_all-active.txt").read_text()
    b = bundle(sim, ibstat={"present": True, "rc": 0, "stdout": ok, "stderr": ""})
    slow = evaluate_node(NodeData.from_bundle(b), dataclasses.replace(exp, ib_rate_gbps=800)).findings
    assert slow and all("expected 800 Gb/s" in f.message for f in slow)


def test_rdma_pool_without_peermem_or_ibstat(sim: Any) -> None:
    b = bundle(sim, modules="nvidia 1234 0 - Live 0x0\n")
    health = evaluate_node(NodeData.from_bundle(b), dataclasses.replace(EXP, fabric="infiniband"))
    assert found(health) == {("peermem", None, "critical", "remediate"), ("ib-port", None, "warning", "remediate")}


def test_installed_driver_versions_reads_dpkg_status() -> None:
    out = CommandOutput(0, "nvidia-driver|1:535.261.03-1|ii \nx|570.1-0ubuntu1|rc \ny||un \n")
    assert installed_driver_versions(out) == ["535.261.03"]


def test_bundle_schema_is_checked(sim: Any) -> None:
    with pytest.raises(ValueError, match="schema"):
        NodeData.from_bundle({**bundle(sim), "schema": 2})


def test_evaluate_marks_unreachable_hosts_critical(sim: Any) -> None:
    spec, lock = load_lock("onprem-h100")
    nodes = evaluate(spec, lock, {"gpu-a-0": "h100-a", "gpu-a-1": "h100-a"}, {"gpu-a-0": bundle(sim)})
    assert [n.status for n in nodes] == ["warning", "critical"]
    assert nodes[1].findings[0].check == "collect"
    # gpu-a-0: onprem pools are InfiniBand; the bundle has peermem but no ibstat.
    assert {f.check for f in nodes[0].findings} == {"ib-port"}


def test_expectations_from_the_stack() -> None:
    spec, lock = load_lock("onprem-h100")
    exp = expectations_for(spec, lock, "h100-a")
    assert (exp.model, exp.driver_version, exp.power_limit_w, exp.fabric, exp.ib_hca) == (
        H100, lock.driver, 700.0, "infiniband", "mlx5")
    assert expectations_for(spec, lock, "system").model is None


def test_inventory_hosts_reads_pools(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(json.dumps({"all": {"children": {
        "gpu": {"hosts": {"gpu-0": None, "gpu-1": None}}, "system": {"hosts": {"control-0": None}},
        "pool_gpu": {"hosts": {"gpu-0": {}, "gpu-1": {}}}, "pool_system": {"hosts": {"control-0": {}}}}}}))
    assert inventory_hosts(inv) == {"gpu-0": "gpu", "gpu-1": "gpu"}


# --- topology against the catalog ----------------------------------------------------------------------

def test_topology_nvlink_pair_down_is_critical(sim: Any) -> None:
    text = sim("topo", "-m").stdout
    rows = text.split("\n")
    # GPU3 <-> GPU5 lose six of their 18 links: both rows and both directions of the matrix change.
    for r, c in ((4, 6), (6, 4)):
        cells = rows[r].split("\t")
        cells[c] = "NV12"
        rows[r] = "\t".join(cells)
    health = evaluate_node(NodeData.from_bundle(bundle(sim, topo={"rc": 0, "stdout": "\n".join(rows)})), EXP)
    assert found(health) == {("topo-nvlink", 3, "critical", "isolate"), ("topo-nvlink", 5, "critical", "isolate")}
    assert "GPU 5: NV12" in next(f.message for f in health.findings if f.gpu == 3)


def test_topology_missing_rail_nic_on_an_ib_pool(sim: Any) -> None:
    seven = render_topo_m(build_board(gpus=8, nvlink=18, numa_cpus=("0-47,96-143", "48-95,144-191"), nics=7))
    ib = dataclasses.replace(EXP, fabric="infiniband")
    health = evaluate_node(NodeData.from_bundle(bundle(sim, topo={"rc": 0, "stdout": seven})), ib)
    topo = [f for f in health.findings if f.check.startswith("topo")]
    assert [(f.check, f.severity, f.action.value) for f in topo] == [("topo-nics", "critical", "isolate")]
    assert "7 NICs behind the GPUs' PCIe switches" in topo[0].message and "GPUs without one: 7" in topo[0].message
    # The same node on a pool without RDMA fabric: NICs are not the pool's business.
    assert evaluate_node(NodeData.from_bundle(bundle(sim, topo={"rc": 0, "stdout": seven})), EXP).findings == []


def test_topology_collection_failure_is_a_warning(sim: Any) -> None:
    failed = {"rc": 9, "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}
    health = evaluate_node(NodeData.from_bundle(bundle(sim, topo=failed)), EXP)
    assert found(health) == {("topo", None, "warning", "monitor")}
    old = bundle(sim)
    del old["topo"]  # bundles collected before topology: nothing to judge
    assert evaluate_node(NodeData.from_bundle(old), EXP).findings == []


@needs_shared
@pytest.mark.parametrize(("capture", "model"), [
    ("h100-80gb-hbm3_x8_nv18_8-nics-pix_driver570.133.20_topo-m_space-separated.txt", "h100-sxm5-80gb"),
    ("h200_x8_nv18_12-nics_spr-56c-numa01_topo-m.txt", "h200-sxm-141gb"),
    ("dgx-a100_8x-a100-sxm4_nv12_12x-mlx5_nps4-numa1357_topo-m.txt", "a100-sxm4-80gb"),
])
def test_catalog_topology_facts_match_real_boards(capture: str, model: str) -> None:
    from gpufleet.validation.health import check_topology_model

    topo = parse_topo_m((REAL / "topo" / capture).read_text())
    exp = Expectations(model=get_gpu(model), driver_version=None, fabric="infiniband")
    assert check_topology_model(topo, None, exp) == []
    assert len(topo.rail_nics()) == get_gpu(model).rail_nics_per_node
    assert set(topo.nvlink(0).values()) == {get_gpu(model).nvlinks_per_gpu_pair}
