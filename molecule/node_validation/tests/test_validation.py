"""node_validation: the bundles the role handed over match the node, and gpufleet's checks judge them.

The check-mode pass collected the healthy node (kept as healthy-<host>.json by side_effect); side_effect
then injected a volatile DBE and Xid 79 on GPU 3, and converge collected the faulty node (<host>.json).
The plain-host timer (group_vars: node_validation_timer_enabled) runs gpufleet's node check on that faulty node.
"""

import json
import os
from pathlib import Path

import pytest
import yaml
from nodestate import installed_version, query_gpus

from gpufleet.catalog import get_gpu
from gpufleet.topology import parse_topo_m
from gpufleet.validation.health import Expectations, NodeData, evaluate_node

DRIVER = "570.172.08"
EXP = Expectations(model=get_gpu("h100-sxm5-80gb"), driver_version=DRIVER, power_limit_w=700.0)

# The timer's names and paths as the role defines them (one copy: its vars and defaults).
ROLE = Path(__file__).resolve().parents[3] / "roles" / "node_validation"
RVARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
UNIT = RVARS["__node_validation_timer_unit"]
STATE = f"/var/lib/{RVARS['__node_validation_timer_state']}"
TEXTFILE = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["node_validation_timer_textfile_dir"]
PROM = f"{TEXTFILE}/gpufleet_health_actions.prom"


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


def _timer_own(path):
    """The files the timer's tasks and runs write: program and modules (with Python's bytecode cache), unit and
    timer (and the timer's enablement link), state and markers, textfile metric."""
    units = [f"/etc/systemd/system/{UNIT}.{ext}" for ext in ("service", "timer")]
    return (path in units or path == f"/etc/systemd/system/timers.target.wants/{UNIT}.timer"
            or path == RVARS["__node_validation_timer_program"]
            or any(path.startswith(d + "/") for d in (RVARS["__node_validation_timer_lib"], STATE, TEXTFILE)))


def _hostname(host):
    return host.check_output("hostname -s").strip()


def _start_check(host):
    r = host.run(f"systemctl start {UNIT}.service")
    assert r.rc == 0, host.run(f"journalctl -u {UNIT}.service --no-pager -n 30").stdout + r.stderr


def test_validation_left_no_file_on_the_node(host):
    # Collection writes nothing on the node; with the timer on, the role's state there is exactly the timer's.
    # converged_files.yml listed the files written since side_effect's mark, after converge and idempotence.
    new_files = _bundle(host, "converged-files-")
    assert [p for p in new_files if not _timer_own(p)] == []
    assert f"/etc/systemd/system/{UNIT}.service" in new_files and RVARS["__node_validation_timer_program"] in new_files
    assert not host.file("/var/lib/gpufleet/validation").exists


def test_check_mode_wrote_none_of_the_timers_files(host):
    listed = _bundle(host, "check-mode-files-")
    assert [p for p in listed if _timer_own(p)] == []


def test_timer_is_enabled_and_active(host):
    timer = host.service(f"{UNIT}.timer")
    assert timer.is_enabled and timer.is_running
    props = host.check_output(f"systemctl show {UNIT}.timer -p Unit -p ActiveState -p LoadState")
    assert set(props.splitlines()) == {f"Unit={UNIT}.service", "ActiveState=active", "LoadState=loaded"}


def test_service_is_the_hardened_oneshot(host):
    unit = host.file(f"/etc/systemd/system/{UNIT}.service")
    assert unit.mode == 0o644 and unit.user == "root"
    for line in ("Type=oneshot", "NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes",
                 "PrivateTmp=yes", f"ReadWritePaths={TEXTFILE}",
                 f"StateDirectory={RVARS['__node_validation_timer_state']}"):
        assert line in unit.content_string.splitlines(), line
    # systemd's reading of the unit, not only the file's text.
    props = host.check_output(f"systemctl show {UNIT}.service -p Type -p NoNewPrivileges -p ProtectSystem "
                              f"-p ProtectHome -p PrivateTmp -p ReadWritePaths -p LoadState")
    assert set(props.splitlines()) == {"Type=oneshot", "NoNewPrivileges=yes", "ProtectSystem=strict",
                                       "ProtectHome=yes", "PrivateTmp=yes", f"ReadWritePaths={TEXTFILE}",
                                       "LoadState=loaded"}


def test_timer_run_marks_the_fault(host):
    _start_check(host)
    name = _hostname(host)
    marker = json.loads(host.file(f"{STATE}/markers/{name}.json").content_string)
    assert (marker["host"], marker["action"]) == (name, "reboot")
    assert marker["taint"] == "gpufleet.io/gpu-unhealthy=reboot:NoExecute"
    assert set(marker["why"].split("; ")) == {"xid-79", "ecc-dbe"}
    assert marker["drain_reason"].startswith("gpufleet:reboot check=xid-79 xid=79(")
    prom = host.file(PROM).content_string.splitlines()
    # The first run (the timer's, or this one) applied it; later ones find it already applied.
    mine = [ln for ln in prom if ln.startswith(f'gpufleet_health_actions{{host="{name}",')]
    assert mine in ([f'gpufleet_health_actions{{host="{name}",pool="-",decision="{d}",action="reboot",'
                     f'failed="false"}} 1'] for d in ("apply", "unchanged")), prom
    assert 'gpufleet_health_actions_held{pool="-"} 0' in prom


def test_healthy_streak_clears_the_marker(host):
    # Last in this file: clears the fault (the DBE counter, and the kernel log as the window moving past the Xid
    # would on a real host). The timer is stopped meanwhile so that only these runs count.
    streak = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["node_validation_timer_healthy_streak"]
    marker = host.file(f"{STATE}/markers/{_hostname(host)}.json")
    host.check_output(f"systemctl stop {UNIT}.timer")
    try:
        _start_check(host)
        assert marker.exists
        host.check_output("gpusim-ctl set --gpu 3 --ecc-dbe-volatile 0 && : > /run/gpusim/kmsg")
        for run in range(1, streak + 1):
            _start_check(host)
            assert marker.exists == (run < streak), run
        assert 'decision="clear",action="reboot"' in host.file(PROM).content_string
    finally:
        host.check_output(f"systemctl start {UNIT}.timer")
