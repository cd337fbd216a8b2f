"""Xid catalog classification, taints/drain reasons, and the kernel-log parser."""

from __future__ import annotations

import pytest

from gpufleet.spec import Taint
from gpufleet.validation.xid import (
    CATALOG,
    CATALOG_URL,
    HEALTH_TAINT_KEY,
    Action,
    classify,
    codes_for,
    drain_reason,
    parse_kernel_log,
    taint_for,
    worst_action,
)

REQUIRED = [13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 119, 120, 140, 143]


@pytest.mark.parametrize(
    ("code", "action", "bucket"),
    [
        (13, Action.APP_ERROR, "RESTART_APP"),
        (31, Action.APP_ERROR, "RESTART_APP"),
        (43, Action.MONITOR, "IGNORE"),
        (45, Action.MONITOR, "WORKFLOW_XID_45"),
        (48, Action.RESET_GPU, "WORKFLOW_XID_48"),
        (63, Action.MONITOR, "IGNORE"),
        (64, Action.ISOLATE, "RESET_GPU"),
        (74, Action.RESET_GPU, "WORKFLOW_NVLINK_ERR"),
        (79, Action.REBOOT, "RESTART_BM"),
        (94, Action.APP_ERROR, "RESTART_APP"),
        (95, Action.RESET_GPU, "RESET_GPU"),
        (119, Action.RESET_GPU, "RESET_GPU"),
        (143, Action.RESET_GPU, "RESET_GPU"),
        (54, Action.ISOLATE, "CHECK_MECHANICALS"),
    ],
)
def test_classification(code: int, action: Action, bucket: str) -> None:
    entry = classify(code)
    assert (entry.action, entry.nvidia_resolution) == (action, bucket)


def test_required_codes_have_sources_and_mnemonics() -> None:
    for code in REQUIRED:
        entry = CATALOG[code]
        assert CATALOG_URL in entry.source, code
        assert entry.mnemonic and entry.mnemonic != "UNKNOWN", code
    assert CATALOG[79].mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert CATALOG[48].mnemonic == "ROBUST_CHANNEL_GPU_ECC_DBE"


def test_deviations_from_the_bucket_say_why() -> None:
    from gpufleet.validation.xid import _BUCKET_ACTION

    for entry in CATALOG.values():
        if _BUCKET_ACTION.get(entry.nvidia_resolution) is not entry.action:
            assert entry.note, f"Xid {entry.code} deviates from NVIDIA's bucket without a note"


def test_unknown_code_is_monitor_with_a_pointer() -> None:
    entry = classify(999)
    assert (entry.action, entry.mnemonic, entry.severity) == (Action.MONITOR, "UNKNOWN", "info")


def test_taints_and_drain_reasons() -> None:
    assert taint_for(Action.REBOOT) == Taint(key=HEALTH_TAINT_KEY, value="reboot", effect="NoExecute")
    assert taint_for(Action.ISOLATE) == Taint(key=HEALTH_TAINT_KEY, value="isolate", effect="NoExecute")
    assert taint_for(Action.RESET_GPU) == Taint(key=HEALTH_TAINT_KEY, value="reset-gpu", effect="NoSchedule")
    assert taint_for(Action.APP_ERROR) is None
    assert taint_for(Action.MONITOR) is None
    assert drain_reason(Action.REBOOT, 79, "0000:18:00") == (
        "gpufleet:reboot xid=79(ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) gpu=0000:18:00")
    assert drain_reason(Action.RESET_GPU) == "gpufleet:reset-gpu"
    assert drain_reason(Action.APP_ERROR, 13) is None


def test_codes_for_each_action_partition_the_catalog() -> None:
    all_codes = [c for a in Action for c in codes_for(a)]
    assert sorted(all_codes) == sorted(CATALOG)
    assert codes_for(Action.REBOOT) == [79, 151]


KMSG = """\
[ 1936.510073] NVRM: GPU at PCI:0000:18:00: GPU-cd57429b-a4d9-917d-72d6-1d9b6c4f6a3a
[ 1936.510087] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.
May 18 19:02:39 gpu-a-0 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
NVRM: Xid (PCI:0000:b3:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 0, TPC 0)
NVRM: Xid (0000:03:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU
NVRM: Xid (PCI:0000:5D:00.0): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. MMU Fault
kernel: some other line mentioning Xid but not NVRM
"""


def test_parse_kernel_log() -> None:
    events = parse_kernel_log(KMSG)
    assert [(e.code, e.pci_bus_id, e.pid, e.process) for e in events] == [
        (79, "0000:18:00", 1234, None),
        (79, "0000:2b:00", None, None),
        (63, "0000:10:1c", 1896, None),
        (13, "0000:b3:00", None, None),
        (48, "0000:03:00", None, None),
        (31, "0000:5d:00.0", 4242, "python3"),
    ]
    assert events[0].message == "GPU has fallen off the bus."
    assert events[2].message == "Row Remapper: New row marked for remapping, reset gpu to activate."
    assert events[3].message == "Graphics SM Warp Exception on (GPC 0, TPC 0)"
    assert events[0].action is Action.REBOOT and events[0].severity == "critical"
    assert events[0].taint == Taint(key=HEALTH_TAINT_KEY, value="reboot", effect="NoExecute")
    assert events[4].drain_reason == "gpufleet:reset-gpu xid=48(ROBUST_CHANNEL_GPU_ECC_DBE) gpu=0000:03:00"
    assert worst_action(events) is Action.REBOOT
    assert worst_action(events[2:4]) is Action.APP_ERROR
    assert worst_action([]) is None
