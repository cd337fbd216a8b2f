"""node_validation: the bundles the role handed over match the node, and gpufleet's checks judge them.

The check-mode pass collected the healthy node (kept as healthy-<host>.json by side_effect); side_effect
then injected a volatile DBE and Xid 79 on GPU 3, and converge collected the faulty node (<host>.json).
"""

import json
import os
from pathlib import Path

import pytest
from nodestate import installed_version, query_gpus

from gpufleet.catalog import get_gpu
from gpufleet.topology import parse_topo_m
from gpufleet.validation.health import Expectations, NodeData, evaluate_node

DRIVER = "570.172.08"
EXP = Expectations(model=get_gpu("h100-sxm5-80gb"), driver_version=DRIVER, power_limit_w=700.0)


def _bundle(host, prefix=""):
    name = f"{prefix}{host.backend.get_hostname()}.json"
    return json.loads((Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "validation" / name).read_text())


@pytest.fixture
def faulty(host):
    return _bundle(host)


@pytest.fixture
def healthy(host):
    return _bundle(host, "healthy-")


def test_bundle_holds_the_nodes_own_outputs(host, faulty):
    assert faulty["schema"] == 1 and faulty["pool"] == "gpu"
    assert faulty["nvidia_smi"]["rc"] == 0
    uuids = [g["uuid"] for g in query_gpus(host, "uuid")]
    data = NodeData.from_bundle(faulty)
    assert data.nvidia_smi is not None
    assert all(u in data.nvidia_smi.stdout for u in uuids) and len(uuids) == 8
    assert data.module_version == host.file("/run/gpusim/sys/module/nvidia/version").content_string.strip()
    pkg = "nvidia-driver-570-open"
    assert f"{pkg}|{installed_version(host, pkg)}|" in faulty["driver_packages"]["stdout"]
    assert faulty["fabricmanager"]["state"] == "active" and host.service("nvidia-fabricmanager").is_running
    assert faulty["ibstat"]["present"] is False
    # topo -m as the node prints it (the simulator's matrix, rendered from the board's topology model).
    assert faulty["topo"]["rc"] == 0
    assert faulty["topo"]["stdout"].rstrip("\n") == host.check_output("nvidia-smi topo -m").rstrip("\n")
    topo = parse_topo_m(faulty["topo"]["stdout"])
    assert (topo.gpu_count, topo.nvlink(0)[7], topo.to_dict()["gpus"][4]["cpu_affinity"]) == (8, 18, "48-95,144-191")
    kmsg = [ln for ln in host.file("/run/gpusim/kmsg").content_string.splitlines() if "NVRM: Xid" in ln]
    assert faulty["kernel_log"]["lines"] == kmsg and len(kmsg) == 1


def test_healthy_node_has_no_finding(healthy):
    # With the topology compared too: NV18 between every GPU pair (catalog nvlinks_per_gpu_pair), and on an
    # InfiniBand pool the 8 rail NICs (ibstat's absence aside).
    health = evaluate_node(NodeData.from_bundle(healthy), EXP)
    ib = Expectations(model=EXP.model, driver_version=DRIVER, power_limit_w=700.0, fabric="infiniband")
    assert [f.check for f in evaluate_node(NodeData.from_bundle(healthy), ib).findings
            if f.check.startswith("topo")] == []
    assert [f.to_json() for f in health.findings] == []
    assert health.status == "ok" and health.gpus == 8 and health.driver == DRIVER
    assert healthy["kernel_log"]["lines"] == []


def test_fault_is_found_with_its_action(host, faulty):
    health = evaluate_node(NodeData.from_bundle(faulty), EXP)
    found = {(f.check, f.gpu, f.severity, f.action.value) for f in health.findings}
    assert found == {("xid-79", 3, "critical", "reboot"), ("ecc-dbe", 3, "critical", "reset-gpu")}
    assert health.status == "critical" and health.action is not None and health.action.value == "reboot"
    taint = health.taint
    assert taint is not None
    assert (taint.key, taint.value, taint.effect) == ("gpufleet.io/gpu-unhealthy", "reboot", "NoExecute")
    bus = next(g for g in query_gpus(host, "index", "pci.bus_id") if g["index"] == "3")["pci.bus_id"]
    xid = "xid=79(ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)"
    assert health.drain_reason == f"gpufleet:reboot check=xid-79 {xid} gpu={bus}"


def test_validation_left_no_file_on_the_node(host):
    assert not host.file("/var/lib/gpufleet/validation").exists
