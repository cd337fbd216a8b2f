"""The GPU simulator, run as a subprocess exactly as /usr/bin/nvidia-smi runs it, under GPUSIM_ROOT."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet import REPO_ROOT
from gpufleet.topology import parse_topo_m
from testbed.fixture_repo.simulator import SIMULATOR_DIR, board_topology, topo_files

GPUSIM = SIMULATOR_DIR / "gpusim.py"
PERSISTENCED = SIMULATOR_DIR / "persistenced.py"
REAL = REPO_ROOT.parent / "shared" / "fixtures" / "real"

Run = Callable[..., subprocess.CompletedProcess[str]]


def _env(root: Path, host: str = "gpu-node-0") -> dict[str, str]:
    return {**os.environ, "GPUSIM_ROOT": str(root), "GPUSIM_HOSTNAME": host}


def make_host(root: Path, driver: str = "570.133.20", board: str | None = None) -> Path:
    (root / "usr/lib/gpusim").mkdir(parents=True, exist_ok=True)
    (root / "usr/lib/gpusim/driver-version").write_text(driver + "\n")
    for dest, text in topo_files().items():  # what the nvidia-utils package installs
        (root / dest.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / dest.lstrip("/")).write_bytes(text)
    if board:
        (root / "etc/gpusim").mkdir(parents=True, exist_ok=True)
        (root / "etc/gpusim/board").write_text(board + "\n")
    return root


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return make_host(tmp_path / "host")


@pytest.fixture
def smi(host: Path) -> Run:
    def run(*args: str, root: Path = host, hostname: str = "gpu-node-0") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(GPUSIM), *args],
            env=_env(root, hostname),
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    return run


def _real(rel: str) -> Path:
    p = REAL / rel
    if not p.exists():
        pytest.skip(f"real fixture {rel} not available (../shared is absent)")
    return p


def _query(smi: Run, fields: str, *extra: str) -> list[str]:
    r = smi(f"--query-gpu={fields}", "--format=csv,noheader", *extra)
    assert r.returncode == 0, r.stdout
    return r.stdout.splitlines()


# --- power limit ---------------------------------------------------------------------------------


def test_power_limit_out_of_range_is_refused_with_nvidia_smi_text(smi: Run) -> None:
    r = smi("-i", "0", "-pl", "800")
    assert r.returncode == 2
    assert r.stdout == (
        "Provided power limit 800.00 W is not a valid power limit which should be between "
        "200.00 W and 700.00 W for GPU 00000000:19:00.0\n"
        "Terminating early due to previous errors.\n"
    )
    assert _query(smi, "power.limit", "-i", "0") == ["700.00 W"]


def test_power_limit_is_set_and_reset_by_reboot(smi: Run, host: Path) -> None:
    r = smi("-i", "1,2", "-pl", "650")
    assert r.returncode == 0
    assert r.stdout == (
        "Power limit for GPU 00000000:3B:00.0 was set to 650.00 W from 700.00 W.\n"
        "Power limit for GPU 00000000:4C:00.0 was set to 650.00 W from 700.00 W.\n"
        "All done.\n"
    )
    assert _query(smi, "index,power.limit,enforced.power.limit,power.default_limit")[:3] == [
        "0, 700.00 W, 700.00 W, 700.00 W",
        "1, 650.00 W, 650.00 W, 700.00 W",
        "2, 650.00 W, 650.00 W, 700.00 W",
    ]
    (host / "run/gpusim/state.json").unlink()  # what a reboot does to /run
    assert _query(smi, "power.limit", "-i", "1") == ["700.00 W"]


def test_settings_need_root_queries_do_not(smi: Run, host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a task without `become` meets on a real host: nvidia-smi reads for anyone, changes only for root.
    monkeypatch.setenv("GPUSIM_UNPRIVILEGED", "1")
    assert _query(smi, "index,power.limit", "-i", "3") == ["3, 700.00 W"]
    assert not (host / "run/gpusim/sys/module/nvidia/version").exists()  # loaded, but not recorded by a user
    for args, what in ((("-pl", "650"), "power limit"), (("-pm", "1"), "persistence mode")):
        r = smi("-i", "3", *args)
        assert (r.returncode, r.stdout) == (
            4, f"Unable to set {what} for GPU 00000000:5D:00.0: Insufficient Permissions\n"
               "Terminating early due to previous errors.\n")
    assert not (host / "run/gpusim/state.json").exists()
    monkeypatch.delenv("GPUSIM_UNPRIVILEGED")
    assert smi("-i", "3", "-pl", "650").returncode == 0
    assert (host / "run/gpusim/sys/module/nvidia/version").read_text() == "570.133.20\n"


def test_l40s_board_limits(smi: Run, tmp_path: Path) -> None:
    root = make_host(tmp_path / "l40s", board="l40s-pcie")
    assert smi("-L", root=root).stdout.count("NVIDIA L40S") == 4
    r = smi("-pl", "360", root=root)
    assert r.returncode == 2
    assert "should be between 100.00 W and 350.00 W for GPU 00000000:4F:00.0\n" in r.stdout


# --- persistence mode ----------------------------------------------------------------------------


def test_persistence_mode_per_gpu(smi: Run) -> None:
    r = smi("-i", "2", "-pm", "1")
    assert (r.returncode, r.stdout) == (0, "Enabled persistence mode for GPU 00000000:4C:00.0.\nAll done.\n")
    assert _query(smi, "persistence_mode", "-i", "0,2") == ["Disabled", "Enabled"]
    again = smi("-i", "2", "-pm", "ENABLED")
    assert again.stdout == "Persistence mode is already Enabled for GPU 00000000:4C:00.0.\nAll done.\n"
    off = smi("-i", "2", "-pm", "0")
    assert off.stdout == "Disabled persistence mode for GPU 00000000:4C:00.0.\nAll done.\n"
    assert _query(smi, "persistence_mode", "-i", "2") == ["Disabled"]


def _wait_for(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_persistenced_enables_all_gpus_while_it_runs(smi: Run, host: Path) -> None:
    pidfile = host / "run/nvidia-persistenced/nvidia-persistenced.pid"
    proc = subprocess.Popen([sys.executable, str(PERSISTENCED), "--foreground", "--verbose"], env=_env(host))
    try:
        _wait_for(pidfile.exists)
        assert int(pidfile.read_text()) == proc.pid
        assert set(_query(smi, "persistence_mode")) == {"Enabled"}
        assert smi("-i", "0").stdout.count("  On  |") == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    assert not pidfile.exists()
    assert set(_query(smi, "persistence_mode")) == {"Disabled"}


def test_persistenced_daemonizes_and_honours_no_persistence_mode(smi: Run, host: Path) -> None:
    pidfile = host / "run/nvidia-persistenced/nvidia-persistenced.pid"
    r = subprocess.run(
        [sys.executable, str(PERSISTENCED), "--no-persistence-mode"], env=_env(host), timeout=10, check=False
    )
    assert r.returncode == 0
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, 0)  # the daemon outlived its parent
        assert smi("-i", "1", "-pm", "1").returncode == 0
        assert _query(smi, "persistence_mode", "-i", "0,1") == ["Disabled", "Enabled"]
        second = subprocess.run(
            [sys.executable, str(PERSISTENCED)],
            env=_env(host),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        assert second.returncode == 1
        assert second.stderr == "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
    finally:
        os.kill(pid, signal.SIGTERM)
    _wait_for(lambda: not pidfile.exists())


# --- --query-gpu ---------------------------------------------------------------------------------


def test_query_gpu_csv_formatting_matches_real_output(smi: Run) -> None:
    fields = (
        "index,name,pci.bus_id,driver_version,persistence_mode,power.limit,power.min_limit,"
        "power.max_limit,memory.total,temperature.gpu,utilization.gpu,ecc.mode.current,"
        "ecc.errors.uncorrected.volatile.total,pcie.link.gen.max,pcie.link.width.max,"
        "clocks_throttle_reasons.active"
    )
    r = smi(f"--query-gpu={fields}", "--format=csv")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == (
        "index, name, pci.bus_id, driver_version, persistence_mode, power.limit [W], power.min_limit [W], "
        "power.max_limit [W], memory.total [MiB], temperature.gpu, utilization.gpu [%], ecc.mode.current, "
        "ecc.errors.uncorrected.volatile.total, pcie.link.gen.max, pcie.link.width.max, "
        "clocks_throttle_reasons.active"
    )
    assert len(lines) == 9
    assert lines[8] == (
        "7, NVIDIA H100 80GB HBM3, 00000000:DB:00.0, 570.133.20, Disabled, 700.00 W, 200.00 W, 700.00 W, "
        "81559 MiB, 30, 0 %, Enabled, 0, 5, 16, 0x0000000000000001"
    )
    nounits = smi("--query-gpu=power.limit,memory.total,utilization.gpu", "--format=csv,nounits", "-i", "0")
    assert nounits.stdout == "power.limit [W], memory.total [MiB], utilization.gpu [%]\n700.00, 81559, 0\n"


def test_query_header_style_is_the_real_one(smi: Run) -> None:
    real = _real("nvidia-smi-csv/h100-sxm-80gb-hbm3_driver590.48.01_1gpu-vm_query-gpu-all-fields_load.csv")
    header = real.read_text().splitlines()[0].split(", ")
    wanted = [
        h
        for h in header
        if h.split(" ")[0]
        in {
            "name",
            "uuid",
            "pci.bus_id",
            "power.limit",
            "power.draw",
            "memory.total",
            "memory.used",
            "utilization.gpu",
            "temperature.gpu",
            "enforced.power.limit",
            "power.default_limit",
            "ecc.mode.current",
            "persistence_mode",
            "pcie.link.width.current",
        }
    ]
    names = ",".join(h.split(" ")[0] for h in wanted)
    ours = smi(f"--query-gpu={names}", "--format=csv").stdout.splitlines()[0].split(", ")
    assert ours == wanted


def test_unknown_field_fails_like_nvidia_smi(smi: Run) -> None:
    r = smi("--query-gpu=index,device_minor", "--format=csv,noheader,nounits")
    assert r.returncode == 2
    assert r.stdout == 'Field "device_minor" is not a valid field to query.\n\n'


def test_gpu_selection_by_index_uuid_and_bus_id(smi: Run) -> None:
    uuids = _query(smi, "uuid")
    assert len(set(uuids)) == 8 and all(re.fullmatch(r"GPU-[0-9a-f-]{36}", u) for u in uuids)
    assert _query(smi, "index", "-i", f"{uuids[5]},00000000:3B:00.0,7") == ["5", "1", "7"]
    assert _query(smi, "index", "-i", "0000:9B:00.0") == ["4"]
    missing = smi("-i", "8", "--query-gpu=index", "--format=csv")
    assert (missing.returncode, missing.stdout) == (6, "No devices were found\n")


def test_identity_is_deterministic_per_host(smi: Run) -> None:
    a = smi("-L", hostname="node-a").stdout
    assert a == smi("-L", hostname="node-a").stdout
    assert a != smi("-L", hostname="node-b").stdout
    assert a.splitlines()[0].startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-")


# --- -q, -q -x, table, topo ----------------------------------------------------------------------


def _xml_paths(root: ET.Element, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for child in root:
        p = f"{prefix}/{child.tag}"
        out.add(p)
        out |= _xml_paths(child, p)
    return out


def _real_xml_paths(*names: str) -> set[str]:
    paths: set[str] = set()
    for n in names:
        paths |= _xml_paths(ET.fromstring(_real(f"nvidia-smi-xml/{n}").read_text()))
    return paths


FIELDS_WE_USE = [
    "gpu/persistence_mode",
    "gpu/uuid",
    "gpu/serial",
    "gpu/pci/pci_bus_id",
    "gpu/pci/pci_gpu_link_info/pcie_gen/current_link_gen",
    "gpu/pci/pci_gpu_link_info/pcie_gen/max_link_gen",
    "gpu/pci/pci_gpu_link_info/link_widths/current_link_width",
    "gpu/clocks_event_reasons/clocks_event_reason_hw_slowdown",
    "gpu/clocks_event_reasons/clocks_event_reason_sw_thermal_slowdown",
    "gpu/ecc_mode/current_ecc",
    "gpu/ecc_errors/volatile/dram_uncorrectable",
    "gpu/ecc_errors/aggregate/dram_uncorrectable",
    "gpu/retired_pages/pending_retirement",
    "gpu/remapped_rows/remapped_row_pending",
    "gpu/remapped_rows/remapped_row_unc",
    "gpu/gpu_power_readings/current_power_limit",
    "gpu/gpu_power_readings/default_power_limit",
    "gpu/gpu_power_readings/min_power_limit",
    "gpu/gpu_power_readings/max_power_limit",
    "gpu/gpu_power_readings/instant_power_draw",
    "gpu/temperature/gpu_temp",
    "gpu/fb_memory_usage/total",
]


def test_xml_has_the_real_570_structure(smi: Run) -> None:
    r = smi("-q", "-x")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[1] == '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">'
    doc = ET.fromstring(r.stdout)
    assert doc.findtext("driver_version") == "570.133.20"
    assert doc.findtext("cuda_version") == "12.8"
    assert len(doc.findall("gpu")) == 8
    ours = _xml_paths(doc)
    # 570 (GeForce) for most paths; the 595 capture has the remapped-rows children a GeForce lacks.
    real = _real_xml_paths(
        "rtx-3060_driver570.124.04_telegraf.xml", "rtx-4000-sff-ada_driver595.84_v13dtd_telegraf.xml"
    )
    for field in FIELDS_WE_USE:
        assert "/" + field in ours, field
        assert "/" + field in real, field
    assert "/gpu/clocks_throttle_reasons" not in ours
    assert "/gpu/power_readings" not in ours
    assert sorted(ours - real) == []
    gpu = doc.findall("gpu")[3]
    assert gpu.get("id") == "00000000:5D:00.0"
    assert gpu.findtext("gpu_power_readings/max_power_limit") == "700.00 W"


def test_xml_550_uses_single_power_draw(smi: Run, tmp_path: Path) -> None:
    root = make_host(tmp_path / "h550", driver="550.163.01")
    doc = ET.fromstring(smi("-q", "-x", "-i", "0", root=root).stdout)
    assert doc.findtext("gpu/gpu_power_readings/power_draw") == "72.00 W"
    assert doc.find("gpu/gpu_power_readings/average_power_draw") is None
    assert doc.findtext("cuda_version") == "12.4"


def _q_labels(text: str) -> list[str]:
    """Label lines of -q output (indent + label, value dropped), from the first GPU block."""
    block = text.split("\nGPU ", 1)[1].split("\n\n", 1)[0]
    return [
        line.split(" : ", 1)[0].rstrip() if " : " in line else line.rstrip()
        for line in block.splitlines()[1:]
    ]


def test_q_590_layout_matches_real_590(smi: Run, tmp_path: Path) -> None:
    real = _real("nvidia-smi-csv/h100-sxm-80gb-hbm3_driver590.48.01_1gpu-vm_q_idle.txt").read_text()
    root = make_host(tmp_path / "h590", driver="590.48.01")
    ours = smi("-q", "-i", "0", root=root).stdout
    assert ours.splitlines()[3] == f"Timestamp{' ' * 46}: " + ours.splitlines()[3].split(": ", 1)[1]
    assert "\nDriver Version                                         : 590.48.01\n" in ours
    assert "\nCUDA Version                                           : 13.1\n" in ours
    real_labels = set(_q_labels(real))
    missing = [label for label in _q_labels(ours) if label not in real_labels]
    assert missing == []
    assert "    Persistence Mode                                   : Disabled" in ours


def test_q_550_layout_matches_real_565(smi: Run, tmp_path: Path) -> None:
    real = _real("nvidia-smi-csv/h100-sxm-80gb-hbm3_x8_driver565.57.01_q.txt").read_text()
    root = make_host(tmp_path / "h550", driver="550.163.01")
    ours = smi("-q", root=root).stdout
    assert ours.startswith(
        "\n==============NVSMI LOG==============\n\nTimestamp                                 : "
    )
    assert "\nAttached GPUs                             : 8\nGPU 00000000:19:00.0\n" in ours
    missing = [label for label in _q_labels(ours) if label not in set(_q_labels(real))]
    assert missing == []
    assert ours.count("\nGPU 00000000:") == 8


def test_table_matches_real_550_table(smi: Run, tmp_path: Path) -> None:
    real = _real("nvidia-smi-csv/h100-sxm-80gb-hbm3_x8_driver550.90.07_table.txt").read_text().splitlines()
    root = make_host(tmp_path / "t550", driver="550.90.07")
    assert smi("-pm", "1", root=root).returncode == 0
    assert smi("--gpusim-ctl", "set", "--gpu", "0", "--temp", "27", root=root).returncode == 0
    ours = smi(root=root).stdout.splitlines()
    assert ours[1:13] == real[1:13]
    assert ours[-7:] == real[-7:]


def test_topo_matrix(smi: Run) -> None:
    real = _real("topo/h100-sxm-80gb-hbm3_driver590.48.01_1gpu-vm_topo-m.txt").read_text()
    out = smi("topo", "-m").stdout
    lines = out.splitlines()
    assert lines[0].startswith("\t\x1b[4mGPU0\tGPU1\t") and lines[0].endswith(
        "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m"
    )
    gpu0 = lines[1].split("\t")
    assert gpu0[:9] == ["GPU0", " X ", *["NV18"] * 7]
    assert gpu0[9] == "PIX" and gpu0[-4:] == ["0-47,96-143", "0", "", "N/A"]
    assert lines[5].split("\t")[-4:] == ["48-95,144-191", "1", "", "N/A"]
    legend = real[real.index("Legend:") :]
    assert legend.rstrip("\n") in out
    assert out.rstrip("\n").endswith("  NIC7: mlx5_7")


@pytest.mark.parametrize("board", ["h100-hgx", "a100-hgx", "l40s-pcie"])
def test_topo_matrix_parses_back_to_the_board_model(tmp_path: Path, smi: Run, board: str) -> None:
    root = make_host(tmp_path / board, board=board)
    r = smi("topo", "-m", root=root)
    assert r.returncode == 0, r.stdout
    topo = parse_topo_m(r.stdout)
    assert topo == board_topology(board)
    expected = {"h100-hgx": (8, 8, 18), "a100-hgx": (8, 8, 12), "l40s-pcie": (4, 0, None)}[board]
    assert (topo.gpu_count, len(topo.nic_labels), topo.nvlink(0).get(1)) == expected


# --- faults, module version ----------------------------------------------------------------------


def test_injected_faults_show_everywhere(smi: Run, host: Path) -> None:
    ctl = smi(
        "--gpusim-ctl",
        "set",
        "--gpu",
        "3",
        "--ecc-dbe-volatile",
        "2",
        "--throttle",
        "hw_slowdown,sw_power_cap",
        "--xid",
        "79",
    )
    assert ctl.returncode == 0, ctl.stderr
    rows = _query(
        smi,
        "index,ecc.errors.uncorrected.volatile.total,clocks_event_reasons.active,clocks_event_reasons.hw_slowdown",
    )
    assert rows[3] == "3, 2, 0x000000000000000C, Active"
    assert rows[2] == "2, 0, 0x0000000000000001, Not Active"
    doc = ET.fromstring(smi("-q", "-x", "-i", "3").stdout)
    assert doc.findtext("gpu/ecc_errors/volatile/dram_uncorrectable") == "2"
    assert doc.findtext("gpu/ecc_errors/aggregate/dram_uncorrectable") == "2"
    assert doc.findtext("gpu/clocks_event_reasons/clocks_event_reason_hw_slowdown") == "Active"
    assert "|                    2 |" in smi("-i", "3").stdout
    assert (host / "run/gpusim/kmsg").read_text() == (
        "NVRM: Xid (PCI:0000:5D:00.0): 79, pid=0, name=gpusim, GPU has fallen off the bus.\n"
    )
    state = json.loads(smi("--gpusim-ctl", "show").stdout)
    assert state["gpus"]["3"]["xids"] == [79]
    bad = smi("--gpusim-ctl", "set", "--throttle", "melting")
    assert bad.returncode == 2 and "unknown throttle reason(s): melting" in bad.stderr


def test_driver_upgrade_without_reboot_is_a_version_mismatch(smi: Run, host: Path) -> None:
    assert smi("-L").returncode == 0  # "loads" 570.133.20
    assert (host / "run/gpusim/sys/module/nvidia/version").read_text() == "570.133.20\n"
    (host / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")  # apt upgraded the driver
    for args in ((), ("-L",), ("--query-gpu=index", "--format=csv"), ("-q", "-x")):
        r = smi(*args)
        assert r.returncode == 18
        assert (
            r.stdout
            == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.172\n"
        )
    assert smi("--gpusim-ctl", "reboot").returncode == 0
    assert _query(smi, "driver_version", "-i", "0") == ["570.172.08"]


def test_no_driver_installed(smi: Run, tmp_path: Path) -> None:
    r = smi(root=tmp_path / "bare")
    assert r.returncode == 9
    assert r.stdout.startswith(
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    )


def test_fabric_state_follows_fabric_manager(smi: Run, host: Path) -> None:
    assert ET.fromstring(smi("-q", "-x", "-i", "0").stdout).findtext("gpu/fabric/state") == "In Progress"
    pid = host / "run/nvidia-fabricmanager/nv-fabricmanager.pid"
    pid.parent.mkdir(parents=True)
    pid.write_text(f"{os.getpid()}\n")  # any live process stands for the daemon
    doc = ET.fromstring(smi("-q", "-x", "-i", "0").stdout)
    assert (doc.findtext("gpu/fabric/state"), doc.findtext("gpu/fabric/status")) == ("Completed", "Success")


def test_fabricmanager_standin_daemonizes_and_logs(smi: Run, host: Path) -> None:
    cfg = host / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.parent.mkdir(parents=True)
    cfg.write_text("LOG_FILE_NAME=/var/log/fm.log\n")
    fm = SIMULATOR_DIR / "fabricmanager.py"
    r = subprocess.run([sys.executable, str(fm), "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"],
                       env=_env(host), timeout=10, check=False)
    assert r.returncode == 0
    pidfile = host / "run/nvidia-fabricmanager/nv-fabricmanager.pid"
    pid = int(pidfile.read_text())
    try:
        assert "Fabric Manager version 570.133.20 is running" in (host / "var/log/fm.log").read_text()
        assert ET.fromstring(smi("-q", "-x", "-i", "7").stdout).findtext("gpu/fabric/state") == "Completed"
    finally:
        os.kill(pid, signal.SIGTERM)
    _wait_for(lambda: not pidfile.exists())


@pytest.mark.parametrize("name", ["persistenced.py", "fabricmanager.py"])
def test_installed_daemon_standins_need_only_the_standard_library(tmp_path: Path, name: str) -> None:
    # What the fixture packages install side by side in /usr/lib/gpusim/: the script and gpusim_daemon
    # (gpusim-common). -E -s -S: nothing but the standard library and the script's own directory.
    for f in (name, "gpusim_daemon.py"):
        shutil.copy(SIMULATOR_DIR / f, tmp_path / f)
    r = subprocess.run([sys.executable, "-E", "-s", "-S", str(tmp_path / name), "--help"],
                       capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 0, r.stderr
