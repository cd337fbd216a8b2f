#!/usr/bin/env python3
"""gpusim: a stand-in for ``nvidia-smi`` on hosts without GPUs (sandbox containers, CI).

Standard library only: it is installed as ``/usr/lib/gpusim/gpusim.py`` by the fixture
``nvidia-utils-<branch>`` package and run by ``/usr/bin/nvidia-smi`` with the system ``python3``.

Files it reads and writes (every path is prefixed by ``$GPUSIM_ROOT``, default ``/``, so unit tests
can run it in a temporary directory):

``/etc/gpusim/board``
    board name: ``h100-hgx`` (default), ``a100-hgx`` or ``l40s-pcie``.
``/usr/lib/gpusim/driver-version``
    the installed driver version (written by the fixture package). Absent: "no driver".
``/run/gpusim/sys/module/nvidia/version``
    the "loaded kernel module". The first call writes the installed version there, as
    nvidia-modprobe loads the module on first use. When it differs from the installed version
    every NVML command fails with "Failed to initialize NVML: Driver/library version mismatch"
    (exit 18), as on a real host after a driver upgrade without reboot. A non-root caller's first
    call works too (nvidia-modprobe is setuid root on a real host) but cannot record the load.
``/run/gpusim/state.json``
    per-GPU state: persistence mode, power limit, ECC counters, throttle reasons, temperature,
    Xids. Absent means freshly booted GPUs (persistence off, default power limit). ``/run`` is a
    tmpfs, so restarting the container resets it like a reboot resets real GPUs.
``/run/nvidia-persistenced/nvidia-persistenced.pid``
    written by the ``nvidia-persistenced`` stand-in; while that process lives (and was not started
    with ``--no-persistence-mode``) every GPU reports persistence mode Enabled.
``/run/nvidia-fabricmanager/nv-fabricmanager.pid``
    written by the fabric manager stand-in; NVSwitch boards report fabric state Completed only
    while it lives.
``/run/gpusim/kmsg``
    kernel-log lines (``NVRM: Xid ...``) for injected Xids.

nvidia-smi options emulated: none (table), ``-L``, ``-q`` (``-d`` is accepted and ignored),
``-q -x``, ``--query-gpu=...`` with ``--format=csv[,noheader][,nounits]``, ``-i`` (index, UUID or
PCI bus id, comma lists), ``-pm 0|1``, ``-pl <watts>``, ``topo -m``, ``--version``. As on a real
host, queries work for any user and ``-pm``/``-pl`` need root ("Insufficient Permissions", exit 4).

Fault injection for tests (``/usr/bin/gpusim-ctl`` runs ``gpusim.py --gpusim-ctl``)::

    gpusim-ctl show                                  # print state.json
    gpusim-ctl set --gpu 3 --ecc-dbe-volatile 1      # DRAM uncorrectable (volatile and aggregate)
    gpusim-ctl set --gpu 3 --ecc-sbe-volatile 5      # DRAM correctable
    gpusim-ctl set --gpu all --throttle hw_slowdown,sw_thermal_slowdown
    gpusim-ctl set --gpu 0 --throttle none           # clear (back to idle)
    gpusim-ctl set --gpu 5 --xid 79                  # appends to the Xid list and /run/gpusim/kmsg
    gpusim-ctl set --gpu 1 --temp 91 --power-draw 650 --util 100 --memory-used 70000
    gpusim-ctl set --gpu 2 --remapped-unc 1 --remap-pending yes
    gpusim-ctl reboot                                # forget state and the loaded module
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------------------------
# Boards. Values come from real captures in ../shared/fixtures/real (SOURCES.md there):
# H100: nvidia-smi-csv/h100-sxm-80gb-hbm3_x8_driver565.57.01_q.txt and ..._driver550.90.07_table.txt
# (bus ids, part numbers, 81559 MiB, 700/200 W, 2560 remap banks);
# A100: a100-sxm4-80gb_x4_driver555.42.02_q.txt (part numbers, 81920 MiB) with the 400 W limit of
# DGX A100 / p4de boards (the captured board is a 500 W variant); L40S: l40s_driver550.127.05_q.txt.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Board:
    name: str
    product: str
    arch: str
    count: int
    bus_ids: tuple[str, ...]
    device_id: str
    subsystem_id: str
    sub_class: str
    board_part: str
    gpu_part: str
    vbios: str
    inforom_img: str
    inforom_ecc: str
    memory_mib: int
    reserved_mib: int
    bar1_mib: int
    power_default: float
    power_min: float
    power_max: float
    idle_power: float
    pcie_gen: int
    pcie_width: int
    nvlink: int  # NV# between every GPU pair; 0 means PCIe only
    nvswitch: bool
    remap_banks: int
    max_clocks: tuple[int, int, int, int]  # graphics, sm, memory, video (MHz)
    idle_clocks: tuple[int, int, int, int]
    serial_prefix: str
    numa_cpus: tuple[str, str]
    nics: int
    shutdown_tlimit: int
    memory_temp: bool


BOARDS: dict[str, Board] = {
    "h100-hgx": Board(
        name="h100-hgx",
        product="NVIDIA H100 80GB HBM3",
        arch="Hopper",
        count=8,
        bus_ids=("19", "3B", "4C", "5D", "9B", "BB", "CB", "DB"),
        device_id="233010DE",
        subsystem_id="16C110DE",
        sub_class="2",
        board_part="692-2G520-0200-000",
        gpu_part="2330-885-A1",
        vbios="96.00.74.00.01",
        inforom_img="G520.0200.00.05",
        inforom_ecc="7.16",
        memory_mib=81559,
        reserved_mib=454,
        bar1_mib=131072,
        power_default=700.0,
        power_min=200.0,
        power_max=700.0,
        idle_power=72.0,
        pcie_gen=5,
        pcie_width=16,
        nvlink=18,
        nvswitch=True,
        remap_banks=2560,
        max_clocks=(1980, 1980, 2619, 1545),
        idle_clocks=(345, 345, 2619, 765),
        serial_prefix="1654",
        numa_cpus=("0-47,96-143", "48-95,144-191"),
        nics=8,
        shutdown_tlimit=-8,
        memory_temp=True,
    ),
    "a100-hgx": Board(
        name="a100-hgx",
        product="NVIDIA A100-SXM4-80GB",
        arch="Ampere",
        count=8,
        bus_ids=("07", "0F", "47", "4E", "87", "90", "B7", "BD"),
        device_id="20B210DE",
        subsystem_id="147F10DE",
        sub_class="2",
        board_part="692-2G506-0212-005",
        gpu_part="20B2-896-A1",
        vbios="92.00.9E.00.02",
        inforom_img="G506.0212.00.02",
        inforom_ecc="6.16",
        memory_mib=81920,
        reserved_mib=640,
        bar1_mib=131072,
        power_default=400.0,
        power_min=100.0,
        power_max=400.0,
        idle_power=59.0,
        pcie_gen=4,
        pcie_width=16,
        nvlink=12,
        nvswitch=True,
        remap_banks=640,
        max_clocks=(1410, 1410, 1593, 1290),
        idle_clocks=(210, 210, 1593, 795),
        serial_prefix="1323",
        numa_cpus=("0-63,128-191", "64-127,192-255"),
        nics=8,
        shutdown_tlimit=-7,
        memory_temp=True,
    ),
    "l40s-pcie": Board(
        name="l40s-pcie",
        product="NVIDIA L40S",
        arch="Ada Lovelace",
        count=4,
        bus_ids=("4F", "52", "D5", "D6"),
        device_id="26B910DE",
        subsystem_id="185110DE",
        sub_class="2",
        board_part="900-2G133-0080-000",
        gpu_part="26B9-896-A1",
        vbios="95.02.66.00.02",
        inforom_img="G133.0242.00.03",
        inforom_ecc="6.16",
        memory_mib=46068,
        reserved_mib=609,
        bar1_mib=65536,
        power_default=350.0,
        power_min=100.0,
        power_max=350.0,
        idle_power=33.0,
        pcie_gen=4,
        pcie_width=16,
        nvlink=0,
        nvswitch=False,
        remap_banks=192,
        max_clocks=(2520, 2520, 9001, 1965),
        idle_clocks=(210, 210, 405, 1185),
        serial_prefix="1322",
        numa_cpus=("0-31,64-95", "32-63,96-127"),
        nics=0,
        shutdown_tlimit=-5,
        memory_temp=False,
    ),
}
DEFAULT_BOARD = "h100-hgx"
#: Where the nvidia-utils package installs each board's ``topo -m`` matrix (<board>.txt).
TOPO_DIR = "/usr/lib/gpusim/topo"

#: CUDA version each driver branch reports (NVIDIA CUDA toolkit release notes, table 3).
CUDA_BY_BRANCH = {
    535: "12.2",
    550: "12.4",
    555: "12.5",
    560: "12.6",
    565: "12.7",
    570: "12.8",
    575: "12.9",
    580: "13.0",
    590: "13.1",
    595: "13.2",
}

#: nvmlClocksThrottleReason*/nvmlClocksEventReason* bits (nvml.h).
THROTTLE_BITS: dict[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}

# nvidia-smi(1) RETURN VALUE section, and the NVML error code it passes through for a mismatch.
EXIT_INVALID_ARG = 2
EXIT_NO_PERMISSION = 4
EXIT_NOT_FOUND = 6
EXIT_NO_DRIVER = 9
EXIT_VERSION_MISMATCH = 18

NA = "N/A"
DEPRECATED = "Requested functionality has been deprecated"


class SmiExit(Exception):
    """Ends a command with nvidia-smi's text (on stdout, as the real tool prints it) and code."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


# ----------------------------------------------------------------------------------------------
# Host: paths, board, driver, state
# ----------------------------------------------------------------------------------------------


def root() -> Path:
    return Path(os.environ.get("GPUSIM_ROOT", "/"))


def path(rel: str) -> Path:
    return root() / rel.lstrip("/")


def hostname() -> str:
    return os.environ.get("GPUSIM_HOSTNAME") or socket.gethostname()


def board() -> Board:
    try:
        name = path("/etc/gpusim/board").read_text().strip()
    except OSError:
        name = DEFAULT_BOARD
    return BOARDS.get(name, BOARDS[DEFAULT_BOARD])


def installed_driver() -> str | None:
    try:
        return path("/usr/lib/gpusim/driver-version").read_text().strip() or None
    except OSError:
        return None


def branch_of(version: str) -> int:
    return int(version.split(".")[0])


def cuda_version(version: str) -> str:
    return CUDA_BY_BRANCH.get(branch_of(version), "13.1")


def privileged() -> bool:
    """Whether the caller may change GPUs: root on a real host (NVML refuses anyone else). Here whoever can
    write the state directory (or its nearest existing parent): root in a node, the test user under
    ``$GPUSIM_ROOT``; ``GPUSIM_UNPRIVILEGED=1`` makes a caller unprivileged anyway (tests run as root)."""
    if os.environ.get("GPUSIM_UNPRIVILEGED") == "1":
        return False
    d = path("/run/gpusim")
    while not d.exists() and d != d.parent:
        d = d.parent
    return os.access(d, os.W_OK)


def require_privileges(what: str, gpus: list[Gpu]) -> None:
    if not privileged():
        raise SmiExit(
            EXIT_NO_PERMISSION,
            f"Unable to set {what} for GPU {gpus[0].bus}: Insufficient Permissions\n"
            "Terminating early due to previous errors.\n",
        )


def load_module(installed: str) -> str:
    """The loaded module's version; the first call "loads" the installed driver."""
    mod = path("/run/gpusim/sys/module/nvidia/version")
    try:
        return mod.read_text().strip()
    except OSError:
        if not privileged():
            # Any user's first NVML call loads the module on a real host (nvidia-modprobe is setuid root);
            # an unprivileged caller cannot record it here, so the next privileged call does.
            return installed
        mod.parent.mkdir(parents=True, exist_ok=True)
        mod.write_text(installed + "\n")
        return installed


def init_nvml() -> str:
    """Driver version, or SmiExit as nvidia-smi fails when NVML cannot initialise."""
    installed = installed_driver()
    if installed is None:
        raise SmiExit(
            EXIT_NO_DRIVER,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.\n",
        )
    loaded = load_module(installed)
    if loaded != installed:
        # The second line names the user-space library's major.minor, as real 535+ output does.
        lib = ".".join(installed.split(".")[:2])
        raise SmiExit(
            EXIT_VERSION_MISMATCH,
            f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {lib}\n",
        )
    return installed


def _digest(*parts: object) -> bytes:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()


def gpu_uuid(b: Board, index: int) -> str:
    return "GPU-" + str(uuid.UUID(bytes=_digest("uuid", hostname(), b.name, index)[:16]))


def gpu_serial(b: Board, index: int) -> str:
    n = int.from_bytes(_digest("serial", hostname(), b.name, index)[:8], "big") % 10**9
    return f"{b.serial_prefix}{n:09d}"


def bus_id(b: Board, index: int) -> str:
    return f"00000000:{b.bus_ids[index]}:00.0"


def default_gpu_state(b: Board) -> dict[str, Any]:
    return {
        "pm": False,
        "power_limit": b.power_default,
        "ecc_sbe_volatile": 0,
        "ecc_dbe_volatile": 0,
        "ecc_sbe_aggregate": 0,
        "ecc_dbe_aggregate": 0,
        "throttle": ["gpu_idle"],
        "temperature": 30,
        "power_draw": b.idle_power,
        "utilization": 0,
        "memory_used": 1,
        "remapped_corr": 0,
        "remapped_unc": 0,
        "remap_pending": False,
        "remap_failure": False,
        "xids": [],
    }


def load_state(b: Board) -> dict[str, Any]:
    state: dict[str, Any] = {"board": b.name, "gpus": {}}
    try:
        saved = json.loads(path("/run/gpusim/state.json").read_text())
        if isinstance(saved, dict) and saved.get("board") == b.name:
            state = saved
    except (OSError, ValueError):
        pass
    gpus = state.setdefault("gpus", {})
    for i in range(b.count):
        merged = default_gpu_state(b)
        merged.update(gpus.get(str(i), {}))
        gpus[str(i)] = merged
    return state


def save_state(state: dict[str, Any]) -> None:
    f = path("/run/gpusim/state.json")
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    tmp.replace(f)


def pid_alive(pidfile: str) -> bool:
    try:
        pid = int(path(pidfile).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) is not a running daemon.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


PERSISTENCED_PID = "/run/nvidia-persistenced/nvidia-persistenced.pid"
PERSISTENCED_MODE = "/run/gpusim/persistenced-mode"
FABRICMANAGER_PID = "/run/nvidia-fabricmanager/nv-fabricmanager.pid"


def persistenced_enables() -> bool:
    if not pid_alive(PERSISTENCED_PID):
        return False
    try:
        return path(PERSISTENCED_MODE).read_text().strip() != "disabled"
    except OSError:
        return True


@dataclass
class Gpu:
    index: int
    board: Board
    st: dict[str, Any]
    daemon_pm: bool
    fabric_up: bool

    @property
    def bus(self) -> str:
        return bus_id(self.board, self.index)

    @property
    def uuid(self) -> str:
        return gpu_uuid(self.board, self.index)

    @property
    def serial(self) -> str:
        return gpu_serial(self.board, self.index)

    @property
    def persistence(self) -> bool:
        return self.daemon_pm or bool(self.st["pm"])

    @property
    def throttle_mask(self) -> int:
        mask = 0
        for name in self.st["throttle"]:
            mask |= THROTTLE_BITS.get(name, 0)
        return mask

    @property
    def ecc_unc_volatile(self) -> int:
        return int(self.st["ecc_dbe_volatile"])

    @property
    def pstate(self) -> str:
        return "P0"


def all_gpus(b: Board, state: dict[str, Any]) -> list[Gpu]:
    daemon = persistenced_enables()
    fabric = pid_alive(FABRICMANAGER_PID)
    return [Gpu(i, b, state["gpus"][str(i)], daemon, fabric) for i in range(b.count)]


def select(gpus: list[Gpu], ids: str | None) -> list[Gpu]:
    if ids is None:
        return gpus
    chosen: list[Gpu] = []
    for raw in ids.split(","):
        key = raw.strip()
        match = [
            g
            for g in gpus
            if key == str(g.index) or key.upper() == g.uuid.upper() or _norm_bus(key) == _norm_bus(g.bus)
        ]
        if not match:
            raise SmiExit(EXIT_NOT_FOUND, "No devices were found\n")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def _norm_bus(value: str) -> str:
    parts = value.upper().split(":")
    if len(parts) == 3:
        return f"{int(parts[0], 16):08X}:{parts[1]}:{parts[2]}"
    if len(parts) == 2:
        return f"00000000:{parts[0]}:{parts[1]}"
    return value.upper()


# ----------------------------------------------------------------------------------------------
# -q / -q -x: one tree renders both, so the text and XML views never disagree.
# A node is (xml_tag | None, q_label | None, value | children). None tag: -q only; None label: XML only.
# ----------------------------------------------------------------------------------------------

Node = tuple[str | None, str | None, "str | list[Node]"]


def _w(v: float) -> str:
    return f"{v:.2f} W"


def _active(g: Gpu, name: str) -> str:
    return "Active" if name in g.st["throttle"] else "Not Active"


def gpu_tree(g: Gpu, driver: str) -> list[Node]:
    b, br, st = g.board, branch_of(driver), g.st
    used = int(st["memory_used"])
    total = b.memory_mib
    free = total - b.reserved_mib - used
    ge570, ge590 = br >= 570, br >= 590
    tree: list[Node] = [
        ("product_name", "Product Name", b.product),
        ("product_brand", "Product Brand", "NVIDIA"),
        ("product_architecture", "Product Architecture", b.arch),
        ("display_mode", "Display Mode", DEPRECATED if ge590 else "Disabled"),
    ]
    if ge590:
        tree.append(("display_attached", "Display Attached", "No"))
    tree += [
        ("display_active", "Display Active", "Disabled"),
        ("persistence_mode", "Persistence Mode", "Enabled" if g.persistence else "Disabled"),
        ("addressing_mode", "Addressing Mode", "None"),
        (
            "mig_mode",
            "MIG Mode",
            [
                ("current_mig", "Current", "Disabled" if b.nvswitch else NA),
                ("pending_mig", "Pending", "Disabled" if b.nvswitch else NA),
            ],
        ),
        ("mig_devices", None, "\nNone\n"),
        ("accounting_mode", "Accounting Mode", "Disabled"),
        ("accounting_mode_buffer_size", "Accounting Mode Buffer Size", "4000"),
        ("driver_model", "Driver Model", [("current_dm", "Current", NA), ("pending_dm", "Pending", NA)]),
        ("serial", "Serial Number", g.serial),
        ("uuid", "GPU UUID", g.uuid),
    ]
    if ge590:
        pdi = int.from_bytes(_digest("pdi", hostname(), b.name, g.index)[:8], "big")
        tree.append(("pdi", "GPU PDI", f"0x{pdi:016x}"))
    tree += [
        ("minor_number", "Minor Number", str(g.index)),
        ("vbios_version", "VBIOS Version", b.vbios),
        ("multigpu_board", "MultiGPU Board", "No"),
        ("board_id", "Board ID", f"0x{int(b.bus_ids[g.index], 16) << 8:x}"),
        ("board_part_number", "Board Part Number", b.board_part),
        ("gpu_part_number", "GPU Part Number", b.gpu_part),
        ("gpu_fru_part_number", "FRU Part Number", NA),
        (
            "platformInfo",
            "Platform Info",
            [
                # 570 renamed these -q labels (565: RACK Serial Number, ...; 570: Chassis Serial Number).
                ("chassis_serial_number", "Chassis Serial Number" if ge570 else "RACK Serial Number", NA),
                ("slot_number", "Slot Number" if ge570 else "Chassis Physical Slot Number", NA),
                ("tray_index", "Tray Index" if ge570 else "Compute Slot Index", NA),
                ("host_id", "Host ID" if ge570 else "Node Index", NA),
                ("peer_type", "Peer Type", NA),
                ("module_id", "Module Id", str(g.index + 1)),
                ("gpu_fabric_guid", "GPU Fabric GUID" if ge570 else None, NA),
            ],
        ),
        (
            "inforom_version",
            "Inforom Version",
            [
                ("img_version", "Image Version", b.inforom_img),
                ("oem_object", "OEM Object", "2.1"),
                ("ecc_object", "ECC Object", b.inforom_ecc),
                ("pwr_object", "Power Management Object", NA),
            ],
        ),
        (
            "inforom_bbx_flush",
            "Inforom BBX Object Flush",
            [
                ("latest_timestamp", "Latest Timestamp", NA),
                ("latest_duration", "Latest Duration", NA),
            ],
        ),
        (
            "gpu_operation_mode",
            "GPU Operation Mode",
            [("current_gom", "Current", NA), ("pending_gom", "Pending", NA)],
        ),
        ("c2c_mode", "GPU C2C Mode", "Disabled"),
        (
            "gpu_virtualization_mode",
            "GPU Virtualization Mode",
            [
                ("virtualization_mode", "Virtualization Mode", "None"),
                ("host_vgpu_mode", "Host VGPU Mode", NA),
                ("vgpu_heterogeneous_mode", "vGPU Heterogeneous Mode", NA),
            ],
        ),
    ]
    if not ge590:
        tree.append(
            (
                "gpu_reset_status",
                "GPU Reset Status",
                [
                    ("reset_required", "Reset Required", "Yes" if st["remap_pending"] else "No"),
                    ("drain_and_reset_recommended", "Drain and Reset Recommended", "No"),
                ],
            )
        )
    caps = "FETCHADD_32 FETCHADD_64 SWAP_32 SWAP_64 CAS_32 CAS_64 "
    link: list[Node] = [
        ("max_link_gen", "Max", str(b.pcie_gen)),
        ("current_link_gen", "Current", str(b.pcie_gen)),
        ("device_current_link_gen", "Device Current", str(b.pcie_gen)),
        ("max_device_link_gen", "Device Max", str(b.pcie_gen)),
        ("max_host_link_gen", "Host Max", str(b.pcie_gen)),
    ]
    tree += [
        ("gpu_recovery_action", "GPU Recovery Action", "None"),
        ("gsp_firmware_version", "GSP Firmware Version", driver),
        ("ibmnpu", "IBMNPU", [("relaxed_ordering_mode", "Relaxed Ordering Mode", NA)]),
        (
            "pci",
            "PCI",
            [
                ("pci_bus", None, b.bus_ids[g.index]),
                (None, "Bus", f"0x{b.bus_ids[g.index]}"),
                ("pci_device", None, "00"),
                (None, "Device", "0x00"),
                ("pci_domain", None, "0000"),
                (None, "Domain", "0x0000"),
                ("pci_base_class", None, "3"),
                (None, "Base Classcode", "0x3"),
                ("pci_sub_class", None, b.sub_class),
                (None, "Sub Classcode", f"0x{b.sub_class}"),
                ("pci_device_id", None, b.device_id),
                (None, "Device Id", f"0x{b.device_id}"),
                ("pci_bus_id", "Bus Id", g.bus),
                ("pci_sub_system_id", None, b.subsystem_id),
                (None, "Sub System Id", f"0x{b.subsystem_id}"),
                (
                    "pci_gpu_link_info",
                    "GPU Link Info",
                    [
                        ("pcie_gen", "PCIe Generation", link),
                        (
                            "link_widths",
                            "Link Width",
                            [
                                ("max_link_width", "Max", f"{b.pcie_width}x"),
                                ("current_link_width", "Current", f"{b.pcie_width}x"),
                            ],
                        ),
                    ],
                ),
                (
                    "pci_bridge_chip",
                    "Bridge Chip",
                    [("bridge_chip_type", "Type", NA), ("bridge_chip_fw", "Firmware", NA)],
                ),
                ("replay_counter", "Replays Since Reset", "0"),
                ("replay_rollover_counter", "Replay Number Rollovers", "0"),
                ("tx_util", "Tx Throughput", "567 KB/s"),
                ("rx_util", "Rx Throughput", "559 KB/s"),
                ("atomic_caps_outbound", "Atomic Caps Outbound", caps),
                ("atomic_caps_inbound", "Atomic Caps Inbound", caps),
            ],
        ),
        ("fan_speed", "Fan Speed", NA),
        ("performance_state", "Performance State", g.pstate),
        (
            "clocks_event_reasons",
            "Clocks Event Reasons",
            [
                ("clocks_event_reason_gpu_idle", "Idle", _active(g, "gpu_idle")),
                (
                    "clocks_event_reason_applications_clocks_setting",
                    "Applications Clocks Setting",
                    _active(g, "applications_clocks_setting"),
                ),
                ("clocks_event_reason_sw_power_cap", "SW Power Cap", _active(g, "sw_power_cap")),
                ("clocks_event_reason_hw_slowdown", "HW Slowdown", _active(g, "hw_slowdown")),
                (
                    "clocks_event_reason_hw_thermal_slowdown",
                    "    HW Thermal Slowdown",
                    _active(g, "hw_thermal_slowdown"),
                ),
                (
                    "clocks_event_reason_hw_power_brake_slowdown",
                    "    HW Power Brake Slowdown",
                    _active(g, "hw_power_brake_slowdown"),
                ),
                ("clocks_event_reason_sync_boost", "Sync Boost", _active(g, "sync_boost")),
                (
                    "clocks_event_reason_sw_thermal_slowdown",
                    "SW Thermal Slowdown",
                    _active(g, "sw_thermal_slowdown"),
                ),
                (
                    "clocks_event_reason_display_clocks_setting",
                    "Display Clock Setting",
                    _active(g, "display_clocks_setting"),
                ),
            ],
        ),
    ]
    if ge590:
        tree.append(
            (
                "clocks_event_reasons_counters",
                "Clocks Event Reasons Counters",
                [
                    ("clocks_event_reasons_counters_sw_power_cap", "SW Power Capping", "0 us"),
                    ("clocks_event_reasons_counters_sync_boost", "Sync Boost", "0 us"),
                    ("clocks_event_reasons_counters_sw_therm_slowdown", "SW Thermal Slowdown", "0 us"),
                    ("clocks_event_reasons_counters_hw_therm_slowdown", "HW Thermal Slowdown", "0 us"),
                    ("clocks_event_reasons_counters_hw_power_brake", "HW Power Braking", "0 us"),
                ],
            )
        )
    util = f"{int(st['utilization'])} %"
    zero3: list[Node] = [("total", "Total", "0 MiB"), ("used", "Used", "0 MiB"), ("free", "Free", "0 MiB")]
    tree += [
        ("sparse_operation_mode", "Sparse Operation Mode", "Disabled"),
        (
            "fb_memory_usage",
            "FB Memory Usage",
            [
                ("total", "Total", f"{total} MiB"),
                ("reserved", "Reserved", f"{b.reserved_mib} MiB"),
                ("used", "Used", f"{used} MiB"),
                ("free", "Free", f"{free} MiB"),
            ],
        ),
        (
            "bar1_memory_usage",
            "BAR1 Memory Usage",
            [
                ("total", "Total", f"{b.bar1_mib} MiB"),
                ("used", "Used", "1 MiB"),
                ("free", "Free", f"{b.bar1_mib - 1} MiB"),
            ],
        ),
        ("cc_protected_memory_usage", "Conf Compute Protected Memory Usage", zero3),
        ("compute_mode", "Compute Mode", "Default"),
        (
            "utilization",
            "Utilization",
            [
                ("gpu_util", "GPU" if ge570 else "Gpu", util),
                ("memory_util", "Memory", "0 %"),
                ("encoder_util", "Encoder", "0 %"),
                ("decoder_util", "Decoder", "0 %"),
                ("jpeg_util", "JPEG", "0 %"),
                ("ofa_util", "OFA", "0 %"),
            ],
        ),
        (
            "encoder_stats",
            "Encoder Stats",
            [
                ("session_count", "Active Sessions", "0"),
                ("average_fps", "Average FPS", "0"),
                ("average_latency", "Average Latency", "0"),
            ],
        ),
        (
            "fbc_stats",
            "FBC Stats",
            [
                ("session_count", "Active Sessions", "0"),
                ("average_fps", "Average FPS", "0"),
                ("average_latency", "Average Latency", "0"),
            ],
        ),
    ]
    if ge570:
        tree.append(
            (
                "dram_encryption_mode",
                "DRAM Encryption Mode",
                [
                    ("current_dram_encryption", "Current", NA),
                    ("pending_dram_encryption", "Pending", NA),
                ],
            )
        )

    def counts(scope: str) -> list[Node]:
        return [
            ("sram_correctable", "SRAM Correctable", "0"),
            ("sram_uncorrectable_parity", "SRAM Uncorrectable Parity", "0"),
            ("sram_uncorrectable_secded", "SRAM Uncorrectable SEC-DED", "0"),
            ("dram_correctable", "DRAM Correctable", str(st[f"ecc_sbe_{scope}"])),
            ("dram_uncorrectable", "DRAM Uncorrectable", str(st[f"ecc_dbe_{scope}"])),
        ]

    ecc_errors: list[Node] = [
        ("volatile", "Volatile", counts("volatile")),
        (
            "aggregate",
            "Aggregate",
            [*counts("aggregate"), ("sram_threshold_exceeded", "SRAM Threshold Exceeded", "No")],
        ),
        (
            "aggregate_uncorrectable_sram_sources",
            "Aggregate Uncorrectable SRAM Sources",
            [
                ("sram_l2", "SRAM L2", "0"),
                ("sram_sm", "SRAM SM", "0"),
                ("sram_microcontroller", "SRAM Microcontroller", "0"),
                ("sram_pcie", "SRAM PCIE", "0"),
                ("sram_other", "SRAM Other", "0"),
            ],
        ),
    ]
    if ge590:
        ecc_errors += [
            ("channel_repair_pending", "Channel Repair Pending", "No"),
            ("tpc_repair_pending", "TPC Repair Pending", "No"),
            ("unrepairable_memory", "Unrepairable Memory", "No"),
        ]
    na_pages: list[Node] = [("retired_count", None, NA), ("retired_pagelist", None, NA)]
    tree += [
        (
            "ecc_mode",
            "ECC Mode",
            [
                ("current_ecc", "Current", "Enabled"),
                ("pending_ecc", "Pending", "Enabled"),
            ],
        ),
        ("ecc_errors", "ECC Errors", ecc_errors),
        (
            "retired_pages",
            "Retired Pages",
            [
                ("multiple_single_bit_retirement", None, na_pages),
                (None, "Single Bit ECC", NA),
                ("double_bit_retirement", None, na_pages),
                (None, "Double Bit ECC", NA),
                ("pending_blacklist", "Pending Page Blacklist", NA),
                ("pending_retirement", None, NA),
            ],
        ),
        (
            "remapped_rows",
            "Remapped Rows",
            [
                ("remapped_row_corr", "Correctable Error", str(st["remapped_corr"])),
                ("remapped_row_unc", "Uncorrectable Error", str(st["remapped_unc"])),
                ("remapped_row_pending", "Pending", "Yes" if st["remap_pending"] else "No"),
                (
                    "remapped_row_failure",
                    "Remapping Failure Occurred",
                    "Yes" if st["remap_failure"] else "No",
                ),
                (
                    "row_remapper_histogram",
                    "Bank Remap Availability Histogram",
                    [
                        (
                            "row_remapper_histogram_max",
                            "Max",
                            f"{b.remap_banks - int(st['remapped_unc'])} bank(s)",
                        ),
                        ("row_remapper_histogram_high", "High", "0 bank(s)"),
                        ("row_remapper_histogram_partial", "Partial", f"{int(st['remapped_unc'])} bank(s)"),
                        ("row_remapper_histogram_low", "Low", "0 bank(s)"),
                        ("row_remapper_histogram_none", "None", "0 bank(s)"),
                    ],
                ),
            ],
        ),
    ]
    temp = int(st["temperature"])
    tree.append(
        (
            "temperature",
            "Temperature",
            [
                ("gpu_temp", "GPU Current Temp", f"{temp} C"),
                ("gpu_temp_tlimit", "GPU T.Limit Temp", f"{87 - temp} C"),
                ("gpu_temp_max_tlimit_threshold", "GPU Shutdown T.Limit Temp", f"{b.shutdown_tlimit} C"),
                ("gpu_temp_slow_tlimit_threshold", "GPU Slowdown T.Limit Temp", "-2 C"),
                ("gpu_temp_max_gpu_tlimit_threshold", "GPU Max Operating T.Limit Temp", "0 C"),
                ("gpu_target_temperature", "GPU Target Temperature", NA),
                ("memory_temp", "Memory Current Temp", f"{temp + 6} C" if b.memory_temp else NA),
                (
                    "gpu_temp_max_mem_tlimit_threshold",
                    "Memory Max Operating T.Limit Temp",
                    "0 C" if b.memory_temp else NA,
                ),
            ],
        )
    )
    draw = float(st["power_draw"])
    limit = float(st["power_limit"])
    if ge570:
        draws: list[Node] = [
            ("average_power_draw", "Average Power Draw", _w(draw)),
            ("instant_power_draw", "Instantaneous Power Draw", _w(draw)),
        ]
    else:
        draws = [("power_draw", "Power Draw", _w(draw))]
    na_limits: list[Node] = [
        ("current_power_limit", "Current Power Limit", NA),
        ("requested_power_limit", "Requested Power Limit", NA),
        ("default_power_limit", "Default Power Limit", NA),
        ("min_power_limit", "Min Power Limit", NA),
        ("max_power_limit", "Max Power Limit", NA),
    ]
    module_draws: list[Node] = [(t, lbl, NA) for t, lbl, _ in draws]
    mem_draws: list[Node] = [(t, lbl, NA) for t, lbl, _ in draws]
    tree += [
        (
            "gpu_power_readings",
            "GPU Power Readings",
            [
                ("power_state", None, g.pstate),
                *draws,
                ("current_power_limit", "Current Power Limit", _w(limit)),
                ("requested_power_limit", "Requested Power Limit", _w(limit)),
                ("default_power_limit", "Default Power Limit", _w(b.power_default)),
                ("min_power_limit", "Min Power Limit", _w(b.power_min)),
                ("max_power_limit", "Max Power Limit", _w(b.power_max)),
            ],
        ),
        # The trailing space is in the real label.
        ("gpu_memory_power_readings", "GPU Memory Power Readings ", mem_draws),
        (
            "module_power_readings",
            "Module Power Readings",
            [("power_state", None, g.pstate), *module_draws, *na_limits],
        ),
    ]
    if ge570:
        tree += [
            ("power_smoothing", "Power Smoothing", NA),
            (
                "power_profiles",
                "Workload Power Profiles",
                [
                    ("power_profile_requested_profiles", "Requested Profiles", NA),
                    ("power_profile_enforced_profiles", "Enforced Profiles", NA),
                ],
            ),
        ]
    if ge590:
        tree.append(("edpp_multiplier", "EDPp Multiplier", "100.00%"))
    gclk, smclk, mclk, vclk = b.idle_clocks
    mg, ms, mm, mv = b.max_clocks
    app = DEPRECATED if ge590 else f"{mg} MHz"
    app_mem = DEPRECATED if ge590 else f"{mm} MHz"
    health: list[Node] = []
    if ge590:
        health.append(("summary", "Summary", NA))
    health.append(("bandwidth", "Bandwidth", NA))
    if ge570:
        health += [
            ("route_recovery_in_progress", "Route Recovery in progress", NA),
            ("route_unhealthy", "Route Unhealthy", NA),
            ("access_timeout_recovery", "Access Timeout Recovery", NA),
        ]
    if ge590:
        health.append(("incorrect_configuration", "Incorrect Configuration", NA))
    if b.nvswitch:
        fstate, fstatus = ("Completed", "Success") if g.fabric_up else ("In Progress", NA)
        clique, cluster = "0", "00000000-0000-0000-0000-000000000000"
    else:
        fstate = fstatus = clique = cluster = NA
    tree += [
        (
            "clocks",
            "Clocks",
            [
                ("graphics_clock", "Graphics", f"{gclk} MHz"),
                ("sm_clock", "SM", f"{smclk} MHz"),
                ("mem_clock", "Memory", f"{mclk} MHz"),
                ("video_clock", "Video", f"{vclk} MHz"),
            ],
        ),
        (
            "applications_clocks",
            "Applications Clocks",
            [("graphics_clock", "Graphics", app), ("mem_clock", "Memory", app_mem)],
        ),
        (
            "default_applications_clocks",
            "Default Applications Clocks",
            [
                ("graphics_clock", "Graphics", app),
                ("mem_clock", "Memory", app_mem),
            ],
        ),
        ("deferred_clocks", "Deferred Clocks", [("mem_clock", "Memory", NA)]),
        (
            "max_clocks",
            "Max Clocks",
            [
                ("graphics_clock", "Graphics", f"{mg} MHz"),
                ("sm_clock", "SM", f"{ms} MHz"),
                ("mem_clock", "Memory", f"{mm} MHz"),
                ("video_clock", "Video", f"{mv} MHz"),
            ],
        ),
        (
            "max_customer_boost_clocks",
            "Max Customer Boost Clocks",
            [("graphics_clock", "Graphics", f"{mg} MHz")],
        ),
        (
            "clock_policy",
            "Clock Policy",
            [("auto_boost", "Auto Boost", NA), ("auto_boost_default", "Auto Boost Default", NA)],
        ),
    ]
    if not ge590:
        tree.append(("voltage", "Voltage", [("graphics_volt", "Graphics", "685.000 mV")]))
    tree += [
        (
            "fabric",
            "Fabric",
            [
                ("state", "State", fstate),
                ("status", "Status", fstatus),
                ("cliqueId", "CliqueId", clique),
                ("clusterUuid", "ClusterUUID", cluster),
                ("health", "Health", health),
            ],
        ),
        ("processes", "Processes", "None"),
        ("accounted_processes", None, ""),
        ("capabilities", "Capabilities", [("egm", "EGM", "disabled")]),
    ]
    return tree


def render_q(gpus: list[Gpu], driver: str, attached: int) -> str:
    width = 55 if branch_of(driver) >= 590 else 42

    def line(indent: int, label: str, value: str | None = None) -> str:
        text = " " * indent + label
        return text if value is None else f"{text.ljust(width)}: {value}"

    out = ["", "==============NVSMI LOG==============", ""]
    out.append(line(0, "Timestamp", time.ctime()))
    out.append(line(0, "Driver Version", driver))
    out.append(line(0, "CUDA Version", cuda_version(driver)))
    out.append("")
    out.append(line(0, "Attached GPUs", str(attached)))

    def walk(nodes: list[Node], indent: int) -> None:
        for _tag, label, value in nodes:
            if label is None:
                continue
            if isinstance(value, list):
                out.append(line(indent, label))
                walk(value, indent + 4)
            else:
                out.append(line(indent, label, value))

    for g in gpus:
        out.append(f"GPU {g.bus}")
        walk(gpu_tree(g, driver), 4)
        out.append("")
    return "\n".join(out) + "\n"


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_xml(gpus: list[Gpu], driver: str, attached: int) -> str:
    dtd = "nvsmi_device_v13.dtd" if branch_of(driver) >= 590 else "nvsmi_device_v12.dtd"
    out = [
        '<?xml version="1.0" ?>',
        f'<!DOCTYPE nvidia_smi_log SYSTEM "{dtd}">',
        "<nvidia_smi_log>",
        f"\t<timestamp>{time.ctime()}</timestamp>",
        f"\t<driver_version>{driver}</driver_version>",
        f"\t<cuda_version>{cuda_version(driver)}</cuda_version>",
        f"\t<attached_gpus>{attached}</attached_gpus>",
    ]

    def walk(nodes: list[Node], depth: int) -> None:
        tab = "\t" * depth
        for tag, _label, value in nodes:
            if tag is None:
                continue
            if isinstance(value, list):
                out.append(f"{tab}<{tag}>")
                walk(value, depth + 1)
                out.append(f"{tab}</{tag}>")
            elif value.startswith("\n"):
                # Real output puts these placeholder words on their own line.
                out.append(f"{tab}<{tag}>")
                out.append(f"{tab}\t{value.strip()}")
                out.append(f"{tab}</{tag}>")
            elif value == "" or (tag == "processes" and value == "None"):
                out.append(f"{tab}<{tag}>")
                out.append(f"{tab}</{tag}>")
            else:
                out.append(f"{tab}<{tag}>{_xml_escape(value)}</{tag}>")

    for g in gpus:
        out.append(f'\t<gpu id="{g.bus}">')
        walk(gpu_tree(g, driver), 2)
        out.append("\t</gpu>")
        out.append("")
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# --query-gpu
# ----------------------------------------------------------------------------------------------

#: field -> (header unit or "", value getter returning (value, unit suffix or "")).
QueryFn = Any


def _fields(driver: str, attached: int) -> dict[str, tuple[str, QueryFn]]:
    def w(v: float) -> tuple[str, str]:
        return f"{v:.2f}", " W"

    def mib(v: int) -> tuple[str, str]:
        return str(v), " MiB"

    def pct(v: int) -> tuple[str, str]:
        return str(v), " %"

    def plain(v: object) -> tuple[str, str]:
        return str(v), ""

    mask = lambda g: plain(f"0x{g.throttle_mask:016X}")  # noqa: E731
    fields: dict[str, tuple[str, QueryFn]] = {
        "timestamp": ("", lambda g: plain(time.strftime("%Y/%m/%d %H:%M:%S.000"))),
        "driver_version": ("", lambda g: plain(driver)),
        "count": ("", lambda g: plain(attached)),
        "index": ("", lambda g: plain(g.index)),
        "name": ("", lambda g: plain(g.board.product)),
        "serial": ("", lambda g: plain(g.serial)),
        "uuid": ("", lambda g: plain(g.uuid)),
        "pci.bus_id": ("", lambda g: plain(g.bus)),
        "pci.device_id": ("", lambda g: plain(f"0x{g.board.device_id}")),
        "pci.sub_device_id": ("", lambda g: plain(f"0x{g.board.subsystem_id}")),
        "persistence_mode": ("", lambda g: plain("Enabled" if g.persistence else "Disabled")),
        "pstate": ("", lambda g: plain(g.pstate)),
        "vbios_version": ("", lambda g: plain(g.board.vbios)),
        "fan.speed": (" [%]", lambda g: ("[N/A]", "")),
        "power.management": ("", lambda g: plain("Enabled")),
        "power.draw": (" [W]", lambda g: w(float(g.st["power_draw"]))),
        "power.draw.average": (" [W]", lambda g: w(float(g.st["power_draw"]))),
        "power.draw.instant": (" [W]", lambda g: w(float(g.st["power_draw"]))),
        "power.limit": (" [W]", lambda g: w(float(g.st["power_limit"]))),
        "enforced.power.limit": (" [W]", lambda g: w(float(g.st["power_limit"]))),
        "power.default_limit": (" [W]", lambda g: w(g.board.power_default)),
        "power.min_limit": (" [W]", lambda g: w(g.board.power_min)),
        "power.max_limit": (" [W]", lambda g: w(g.board.power_max)),
        "memory.total": (" [MiB]", lambda g: mib(g.board.memory_mib)),
        "memory.reserved": (" [MiB]", lambda g: mib(g.board.reserved_mib)),
        "memory.used": (" [MiB]", lambda g: mib(int(g.st["memory_used"]))),
        "memory.free": (
            " [MiB]",
            lambda g: mib(g.board.memory_mib - g.board.reserved_mib - int(g.st["memory_used"])),
        ),
        "temperature.gpu": ("", lambda g: plain(int(g.st["temperature"]))),
        "temperature.memory": (
            "",
            lambda g: plain(int(g.st["temperature"]) + 6 if g.board.memory_temp else NA),
        ),
        "utilization.gpu": (" [%]", lambda g: pct(int(g.st["utilization"]))),
        "utilization.memory": (" [%]", lambda g: pct(0)),
        "ecc.mode.current": ("", lambda g: plain("Enabled")),
        "ecc.mode.pending": ("", lambda g: plain("Enabled")),
        "ecc.errors.corrected.volatile.total": ("", lambda g: plain(g.st["ecc_sbe_volatile"])),
        "ecc.errors.corrected.aggregate.total": ("", lambda g: plain(g.st["ecc_sbe_aggregate"])),
        "ecc.errors.uncorrected.volatile.total": ("", lambda g: plain(g.st["ecc_dbe_volatile"])),
        "ecc.errors.uncorrected.aggregate.total": ("", lambda g: plain(g.st["ecc_dbe_aggregate"])),
        "ecc.errors.corrected.volatile.dram": ("", lambda g: plain(g.st["ecc_sbe_volatile"])),
        "ecc.errors.uncorrected.volatile.dram": ("", lambda g: plain(g.st["ecc_dbe_volatile"])),
        "remapped_rows.correctable": ("", lambda g: plain(g.st["remapped_corr"])),
        "remapped_rows.uncorrectable": ("", lambda g: plain(g.st["remapped_unc"])),
        "remapped_rows.pending": ("", lambda g: plain("Yes" if g.st["remap_pending"] else "No")),
        "remapped_rows.failure": ("", lambda g: plain("Yes" if g.st["remap_failure"] else "No")),
        "pcie.link.gen.current": ("", lambda g: plain(g.board.pcie_gen)),
        "pcie.link.gen.max": ("", lambda g: plain(g.board.pcie_gen)),
        "pcie.link.width.current": ("", lambda g: plain(g.board.pcie_width)),
        "pcie.link.width.max": ("", lambda g: plain(g.board.pcie_width)),
        "clocks_event_reasons.active": ("", mask),
        "clocks_event_reasons.supported": ("", lambda g: plain("0x00000000000001FF")),
        "clocks.current.graphics": (" [MHz]", lambda g: (str(g.board.idle_clocks[0]), " MHz")),
        "clocks.current.sm": (" [MHz]", lambda g: (str(g.board.idle_clocks[1]), " MHz")),
        "clocks.current.memory": (" [MHz]", lambda g: (str(g.board.idle_clocks[2]), " MHz")),
        "clocks.max.graphics": (" [MHz]", lambda g: (str(g.board.max_clocks[0]), " MHz")),
        "clocks.max.sm": (" [MHz]", lambda g: (str(g.board.max_clocks[1]), " MHz")),
        "clocks.max.memory": (" [MHz]", lambda g: (str(g.board.max_clocks[2]), " MHz")),
        "compute_mode": ("", lambda g: plain("Default")),
        "mig.mode.current": ("", lambda g: plain("Disabled" if g.board.nvswitch else "[N/A]")),
    }
    for reason in THROTTLE_BITS:
        if reason == "display_clocks_setting":
            continue
        fields[f"clocks_event_reasons.{reason}"] = ("", lambda g, r=reason: plain(_active(g, r)))
    # Documented aliases (nvidia-smi --help-query-gpu: '"name" or "gpu_name"', '"clocks_event_reasons.*"
    # or "clocks_throttle_reasons.*"'); the header echoes the name the caller used.
    aliases = {"gpu_name": "name", "gpu_serial": "serial", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}
    for alias, target in aliases.items():
        fields[alias] = fields[target]
    for key in [k for k in fields if k.startswith("clocks_event_reasons.")]:
        fields[key.replace("clocks_event_reasons.", "clocks_throttle_reasons.")] = fields[key]
    return fields


def query_gpu(gpus: list[Gpu], driver: str, attached: int, names: list[str], fmt: set[str]) -> str:
    fields = _fields(driver, attached)
    for n in names:
        if n not in fields:
            raise SmiExit(EXIT_INVALID_ARG, f'Field "{n}" is not a valid field to query.\n\n')
    nounits = "nounits" in fmt
    lines = []
    if "noheader" not in fmt:
        lines.append(", ".join(n + fields[n][0] for n in names))
    for g in gpus:
        cells = []
        for n in names:
            value, unit = fields[n][1](g)
            cells.append(value if nounits or value in (NA, "[N/A]") else value + unit)
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Default table, -L, topo -m
# ----------------------------------------------------------------------------------------------


def render_table(gpus: list[Gpu], driver: str) -> str:
    br = branch_of(driver)
    # 575+ prints a wider PID column; 590 closes the header box with '+' (575 still has '|').
    sep = "+" if br >= 590 else "|"
    out = [time.ctime() + "       "]
    out.append("+" + "-" * 89 + "+")
    out.append(
        f"| NVIDIA-SMI {driver:<23}Driver Version: {driver:<15}CUDA Version: {cuda_version(driver):<9}|"
    )
    out.append(
        f"{sep}-----------------------------------------+------------------------+----------------------+"
    )
    out.append("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    out.append("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    out.append("|                                         |                        |               MIG M. |")
    out.append("|=========================================+========================+======================|")
    for g in gpus:
        name = g.board.product
        pm = "On" if g.persistence else "Off"
        if len(name) > 28:
            name = name[:25] + "..."
        c1 = f" {g.index:>3}  {name:<31}{pm:<4}"
        c2 = f"   {g.bus} Off ".rjust(24)
        c3 = f"{g.ecc_unc_volatile:>21} "
        out.append(f"|{c1}|{c2}|{c3}|")
        draw = f"{round(float(g.st['power_draw']))}W"
        cap = f"{round(float(g.st['power_limit']))}W"
        r1 = f" N/A  {int(g.st['temperature']):>3}C    {g.pstate}{draw:>16} / {cap:>5} "
        mem = f"{int(g.st['memory_used'])}MiB /  {g.board.memory_mib}MiB "
        util = f"{int(g.st['utilization'])}%"
        out.append(f"|{r1:<41}|{mem:>24}|{util:>8}      Default |")
        mig = "Disabled" if g.board.nvswitch else "N/A"
        out.append(f"|{'':41}|{'':24}|{mig:>21} |")
        out.append(
            "+-----------------------------------------+------------------------+----------------------+"
        )
    out.append("")
    out.append("+" + "-" * 89 + "+")
    out.append("| Processes:" + " " * 78 + "|")
    if br >= 575:
        out.append(
            "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |"
        )
    else:
        out.append(
            "|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |"
        )
    out.append("|        ID   ID                                                               Usage      |")
    out.append("|" + "=" * 89 + "|")
    out.append("|  No running processes found" + " " * 61 + "|")
    out.append("+" + "-" * 89 + "+")
    return "\n".join(out) + "\n"


def render_list(gpus: list[Gpu]) -> str:
    return "".join(f"GPU {g.index}: {g.board.product} (UUID: {g.uuid})\n" for g in gpus)


def render_topo(b: Board) -> str:
    """``topo -m``: the matrix the fixture build rendered for this board from gpufleet's topology model
    (testbed.fixture_repo.simulator.topo_files: the Board's count, nvlink, numa_cpus and nics through
    gpufleet.topology.build_board and render_topo_m), so the simulator and the parser share one grammar."""
    try:
        return path(f"{TOPO_DIR}/{b.name}.txt").read_text()
    except OSError:
        raise SmiExit(EXIT_NOT_FOUND, f"Unable to determine the device topology ({TOPO_DIR}/{b.name}.txt)\n") from None


# ----------------------------------------------------------------------------------------------
# Settings: -pm, -pl
# ----------------------------------------------------------------------------------------------


def set_persistence(state: dict[str, Any], gpus: list[Gpu], value: str) -> str:
    v = value.strip().upper()
    if v in ("1", "ENABLED"):
        enable = True
    elif v in ("0", "DISABLED"):
        enable = False
    else:
        raise SmiExit(
            EXIT_INVALID_ARG, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
        )
    require_privileges("persistence mode", gpus)
    out = []
    for g in gpus:
        word = "Enabled" if enable else "Disabled"
        if g.persistence == enable:
            out.append(f"Persistence mode is already {word} for GPU {g.bus}.")
        else:
            out.append(f"{word} persistence mode for GPU {g.bus}.")
        state["gpus"][str(g.index)]["pm"] = enable
    save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


def set_power_limit(state: dict[str, Any], gpus: list[Gpu], value: str) -> str:
    try:
        watts = float(value)
    except ValueError:
        raise SmiExit(
            EXIT_INVALID_ARG, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
        ) from None
    for g in gpus:
        b = g.board
        if not b.power_min <= watts <= b.power_max:
            raise SmiExit(
                EXIT_INVALID_ARG,
                f"Provided power limit {watts:.2f} W is not a valid power limit which should be between "
                f"{b.power_min:.2f} W and {b.power_max:.2f} W for GPU {g.bus}\n"
                "Terminating early due to previous errors.\n",
            )
    require_privileges("power limit", gpus)
    out = []
    for g in gpus:
        old = float(g.st["power_limit"])
        state["gpus"][str(g.index)]["power_limit"] = watts
        out.append(f"Power limit for GPU {g.bus} was set to {watts:.2f} W from {old:.2f} W.")
    save_state(state)
    out.append("All done.")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------

USAGE_ERROR = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
HELP = (
    "NVIDIA System Management Interface -- v{version}\n\n"
    "NVSMI provides monitoring information for Tesla and select Quadro devices.\n"
    "(gpusim stand-in: supports -L, -q [-x], --query-gpu, -i, -pm, -pl, topo -m, --version)\n"
)


@dataclass
class Args:
    ids: str | None = None
    query: bool = False
    xml: bool = False
    list_gpus: bool = False
    query_gpu: str | None = None
    fmt: str | None = None
    pm: str | None = None
    pl: str | None = None
    topo: bool = False
    version: bool = False
    help: bool = False


_VALUED = {
    "-i": "ids",
    "--id": "ids",
    "-pm": "pm",
    "--persistence-mode": "pm",
    "-pl": "pl",
    "--power-limit": "pl",
    "--query-gpu": "query_gpu",
    "--format": "fmt",
    "-d": "",
    "--display": "",
    "-f": "",
    "--filename": "",
}
_FLAGS = {
    "-q": "query",
    "--query": "query",
    "-x": "xml",
    "--xml-format": "xml",
    "-L": "list_gpus",
    "--list-gpus": "list_gpus",
    "--version": "version",
    "-h": "help",
    "--help": "help",
    "-a": "query",
}


def parse(argv: list[str]) -> Args:
    a = Args()
    rest = list(argv)
    if rest and rest[0] == "topo":
        if rest[1:2] not in (["-m"], ["--matrix"]):
            raise SmiExit(EXIT_INVALID_ARG, USAGE_ERROR)
        a.topo = True
        rest = rest[2:]
    while rest:
        tok = rest.pop(0)
        key, eq, val = tok.partition("=")
        if key in _VALUED:
            if not eq:
                if not rest:
                    raise SmiExit(EXIT_INVALID_ARG, USAGE_ERROR)
                val = rest.pop(0)
            if _VALUED[key]:
                setattr(a, _VALUED[key], val)
        elif tok in _FLAGS:
            setattr(a, _FLAGS[tok], True)
        elif tok in ("-qx", "-xq"):
            a.query = a.xml = True
        else:
            raise SmiExit(EXIT_INVALID_ARG, USAGE_ERROR)
    return a


def nvidia_smi(argv: list[str]) -> tuple[int, str]:
    try:
        a = parse(argv)
        if a.help:
            return 0, HELP.format(version=installed_driver() or "unknown")
        driver = init_nvml()
        b = board()
        if a.topo:
            return 0, render_topo(b)
        if a.version:
            return 0, (
                f"NVIDIA-SMI version  : {driver}\nNVML version        : {driver}\n"
                f"DRIVER version      : {driver}\nCUDA Version        : {cuda_version(driver)}\n"
            )
        state = load_state(b)
        gpus = all_gpus(b, state)
        chosen = select(gpus, a.ids)
        if a.pm is not None:
            return 0, set_persistence(state, chosen, a.pm)
        if a.pl is not None:
            return 0, set_power_limit(state, chosen, a.pl)
        if a.query_gpu is not None:
            fmt = {f.strip() for f in (a.fmt or "").split(",") if f.strip()}
            if "csv" not in fmt:
                raise SmiExit(EXIT_INVALID_ARG, USAGE_ERROR)
            names = [n.strip() for n in a.query_gpu.split(",") if n.strip()]
            return 0, query_gpu(chosen, driver, len(gpus), names, fmt)
        if a.list_gpus:
            return 0, render_list(chosen)
        if a.query:
            render = render_xml if a.xml else render_q
            return 0, render(chosen, driver, len(gpus))
        return 0, render_table(chosen, driver)
    except SmiExit as e:
        return e.code, e.text


# ----------------------------------------------------------------------------------------------
# gpusim-ctl
# ----------------------------------------------------------------------------------------------

XID_TEXT = {
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer",
    63: "Row remapping event",
    64: "Row remapper error",
    74: "NVLink error",
    79: "GPU has fallen off the bus.",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
}


def ctl(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="gpusim-ctl", description="Inject GPU faults into the gpusim state.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("show", help="print the state as JSON")
    sub.add_parser("reboot", help="forget GPU state and the loaded module (as a reboot does)")
    s = sub.add_parser("set", help="change GPU state")
    s.add_argument("--gpu", default="all", help="index, comma list or 'all'")
    s.add_argument("--ecc-sbe-volatile", type=int)
    s.add_argument("--ecc-dbe-volatile", type=int)
    s.add_argument("--throttle", help="comma list of reasons (" + ", ".join(THROTTLE_BITS) + ") or 'none'")
    s.add_argument("--temp", type=int)
    s.add_argument("--power-draw", type=float)
    s.add_argument("--util", type=int)
    s.add_argument("--memory-used", type=int)
    s.add_argument("--xid", type=int, action="append")
    s.add_argument("--remapped-unc", type=int)
    s.add_argument("--remap-pending", choices=["yes", "no"])
    s.add_argument("--persistence", choices=["0", "1"])
    s.add_argument("--power-limit", type=float)
    ns = p.parse_args(argv)
    b = board()
    if ns.cmd == "reboot":
        for rel in ("/run/gpusim/state.json", "/run/gpusim/sys/module/nvidia/version"):
            path(rel).unlink(missing_ok=True)
        return 0
    state = load_state(b)
    if ns.cmd == "show":
        sys.stdout.write(json.dumps(state, indent=2, sort_keys=True) + "\n")
        return 0
    indices = list(range(b.count)) if ns.gpu == "all" else [int(x) for x in ns.gpu.split(",")]
    for i in indices:
        if not 0 <= i < b.count:
            sys.stderr.write(f"gpusim-ctl: no GPU {i} on board {b.name} ({b.count} GPUs)\n")
            return 2
    if ns.throttle:
        bad = [r for r in ns.throttle.split(",") if r not in THROTTLE_BITS and r != "none"]
        if bad:
            sys.stderr.write(f"gpusim-ctl: unknown throttle reason(s): {', '.join(bad)}\n")
            return 2
    for i in indices:
        st = state["gpus"][str(i)]
        if ns.ecc_sbe_volatile is not None:
            st["ecc_sbe_aggregate"] += max(0, ns.ecc_sbe_volatile - st["ecc_sbe_volatile"])
            st["ecc_sbe_volatile"] = ns.ecc_sbe_volatile
        if ns.ecc_dbe_volatile is not None:
            # Aggregate counters include everything ever counted as volatile.
            st["ecc_dbe_aggregate"] += max(0, ns.ecc_dbe_volatile - st["ecc_dbe_volatile"])
            st["ecc_dbe_volatile"] = ns.ecc_dbe_volatile
        if ns.throttle:
            st["throttle"] = [] if ns.throttle == "none" else ns.throttle.split(",")
        for key, val in (
            ("temperature", ns.temp),
            ("power_draw", ns.power_draw),
            ("utilization", ns.util),
            ("memory_used", ns.memory_used),
            ("remapped_unc", ns.remapped_unc),
            ("power_limit", ns.power_limit),
        ):
            if val is not None:
                st[key] = val
        if ns.remap_pending:
            st["remap_pending"] = ns.remap_pending == "yes"
        if ns.persistence:
            st["pm"] = ns.persistence == "1"
        for xid in ns.xid or []:
            st["xids"].append(xid)
            kmsg = path("/run/gpusim/kmsg")
            kmsg.parent.mkdir(parents=True, exist_ok=True)
            pci = bus_id(b, i)[4:]
            with kmsg.open("a") as f:
                f.write(
                    f"NVRM: Xid (PCI:{pci}): {xid}, pid=0, name=gpusim, {XID_TEXT.get(xid, 'GPU error')}\n"
                )
    save_state(state)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--gpusim-ctl"]:
        return ctl(args[1:])
    code, text = nvidia_smi(args)
    sys.stdout.write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
