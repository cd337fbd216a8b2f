"""Xid events: NVIDIA's catalog mapped to gpufleet actions, and a parser of kernel-log Xid lines.

Every entry carries NVIDIA's mnemonic and "Resolution Bucket (Immediate Action)" from the Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and newer) and the action
gpufleet takes. NVIDIA's buckets map to actions as follows; where an entry deviates, its ``note`` says why:

=================================  ============
NVIDIA bucket                      action
=================================  ============
RESTART_APP                        APP_ERROR    (the job must restart; the node keeps serving)
IGNORE, XID_154                    MONITOR
RESET_GPU, WORKFLOW_* (48, 74,     RESET_GPU    (drain the GPU's node, ``nvidia-smi -r``, re-validate)
144-150)
RESTART_BM, RESTART_VM             REBOOT
CONTACT_SUPPORT, CHECK_MECHANICALS ISOLATE      (out of service until someone inspects/RMAs it)
=================================  ============

Each action maps to a Kubernetes taint and a Slurm drain reason (``taint_for``, ``drain_reason``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Literal

# Only the type at import time: the Slurm health program runs this module on a node with bare python3 (no
# pydantic, which gpufleet.spec needs); taint_for imports it where it is called.
if TYPE_CHECKING:
    from gpufleet.spec import Taint

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
XID_DOC_URL = "https://docs.nvidia.com/deploy/xid-errors/index.html"
ROW_REMAP_URL = "https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/index.html"

Severity = Literal["critical", "warning", "info"]

#: Taint key a node gets when a GPU on it needs an action (value: the action, e.g. "reset-gpu").
HEALTH_TAINT_KEY = "gpufleet.io/gpu-unhealthy"


class Action(StrEnum):
    ISOLATE = "isolate"
    REBOOT = "reboot"
    RESET_GPU = "reset-gpu"
    APP_ERROR = "app-error"
    MONITOR = "monitor"


#: Most to least disruptive; the node's action is the first one any of its events needs.
ACTION_ORDER = (Action.ISOLATE, Action.REBOOT, Action.RESET_GPU, Action.APP_ERROR, Action.MONITOR)

SEVERITY: dict[Action, Severity] = {
    Action.ISOLATE: "critical",
    Action.REBOOT: "critical",
    Action.RESET_GPU: "critical",
    Action.APP_ERROR: "warning",
    Action.MONITOR: "info",
}

_BUCKET_ACTION: dict[str, Action] = {
    "RESTART_APP": Action.APP_ERROR,
    "IGNORE": Action.MONITOR,
    "XID_154": Action.MONITOR,
    "RESET_GPU": Action.RESET_GPU,
    "WORKFLOW_XID_48": Action.RESET_GPU,
    "WORKFLOW_NVLINK_ERR": Action.RESET_GPU,
    "WORKFLOW_NVLINK5_ERR": Action.RESET_GPU,
    "RESTART_BM": Action.REBOOT,
    "RESTART_VM": Action.REBOOT,
    "CONTACT_SUPPORT": Action.ISOLATE,
    "CHECK_MECHANICALS": Action.ISOLATE,
}


@dataclass(frozen=True)
class XidEntry:
    code: int
    mnemonic: str
    description: str
    #: NVIDIA's "Resolution Bucket (Immediate Action)".
    nvidia_resolution: str
    action: Action
    source: str
    note: str = ""

    @property
    def severity(self) -> Severity:
        return SEVERITY[self.action]


def _e(code: int, mnemonic: str, description: str, bucket: str, note: str = "",
       action: Action | None = None, source: str = CATALOG_URL) -> XidEntry:
    return XidEntry(code, mnemonic, description, bucket, action or _BUCKET_ACTION[bucket], source, note)


_ENTRIES = [
    _e(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    _e(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics Engine Exception", "RESTART_APP",
       "usually an application bug (out-of-range access); the same GPU failing for different jobs points "
       "to hardware (investigatory WORKFLOW_XID_13)"),
    _e(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP",
       "illegal address in the application; investigatory WORKFLOW_XID_31"),
    _e(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", "RESTART_APP"),
    _e(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", "IGNORE",
       "the driver killed a faulting context; the GPU keeps working"),
    _e(44, "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW", "Graphics Engine fault during context switch", "IGNORE"),
    _e(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup, due to previous errors",
       "WORKFLOW_XID_45",
       "follows another Xid (act on that one); alone on NVSwitch systems the catalog says restart the "
       "fabric manager", action=Action.MONITOR),
    _e(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", "RESET_GPU"),
    _e(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double Bit ECC Error", "WORKFLOW_XID_48",
       "reset to activate the row remap; isolate if the remap then fails (Xid 64) or stays pending"),
    _e(54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "Auxiliary power is not connected to the GPU board",
       "CHECK_MECHANICALS"),
    _e(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint/warning", "CONTACT_SUPPORT",
       "unused on Ampere and newer per the catalog; on older GPUs see the Xid message list",
       source=f"{CATALOG_URL}; {XID_DOC_URL}"),
    _e(62, "PMU_HALT_ERROR", "Internal micro-controller halt", "RESET_GPU"),
    _e(63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE",
       "the remap/retirement takes effect at the next GPU reset; the pending-remap health check catches it",
       source=f"{CATALOG_URL}; {ROW_REMAP_URL}"),
    _e(64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU",
       "catalog: RESET_GPU then CONTACT_SUPPORT; gpufleet isolates because a failed remap leaves the bad "
       "row in service", action=Action.ISOLATE, source=f"{CATALOG_URL}; {ROW_REMAP_URL}"),
    _e(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", "RESTART_APP"),
    _e(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", "RESTART_APP"),
    _e(74, "NVLINK_ERROR", "NVLINK Error", "WORKFLOW_NVLINK_ERR",
       "gpufleet does not decode the link registers the workflow reads; it resets, and a recurrence after "
       "the reset should be isolated"),
    _e(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    _e(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", "IGNORE"),
    _e(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", "RESTART_APP",
       "only the application on the affected GPU is hit; reset at the next drain to remap the row"),
    _e(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", "RESET_GPU"),
    _e(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", "RESET_GPU"),
    _e(110, "SEC_FAULT_ERROR", "Security Fault Error", "RESET_GPU"),
    _e(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", "RESET_GPU"),
    _e(120, "GSP_ERROR", "GSP Error", "RESET_GPU"),
    _e(121, "C2C_ERROR", "C2C Error", "IGNORE"),
    _e(136, "ALI_TRAINING_FAIL", "Link Training Failed", "RESET_GPU"),
    _e(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", "IGNORE"),
    _e(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", "RESET_GPU"),
    _e(143, "GPU_INIT_ERROR", "GPU Initialization Error", "RESET_GPU"),
    *(
        _e(code, f"NVLINK_{unit}_ERROR", f"NVLINK: {unit} Error", "WORKFLOW_NVLINK5_ERR",
           "gpufleet does not decode the NVLink5 intrinfo; it resets (the decode table marks the fatal "
           "statuses RESET_GPU)")
        for code, unit in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW_CTRL"),
                           (149, "NETIR"), (150, "MSE"))
    ),
    _e(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", "RESTART_VM"),
    _e(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU Recovery Action Changed", "XID_154",
       "informational: the message names the recovery action another Xid needs"),
    _e(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", "RESET_GPU"),
    _e(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", "RESET_GPU"),
    _e(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", "RESET_GPU"),
]

CATALOG: dict[int, XidEntry] = {e.code: e for e in _ENTRIES}


def classify(code: int) -> XidEntry:
    """Catalog entry of an Xid; codes gpufleet does not list are MONITOR, to be looked up by hand."""
    entry = CATALOG.get(code)
    if entry is not None:
        return entry
    return XidEntry(code, "UNKNOWN", "not in gpufleet's Xid catalog", "UNKNOWN", Action.MONITOR,
                    CATALOG_URL, "look the code up in NVIDIA's catalog and add it to gpufleet.validation.xid")


def codes_for(action: Action) -> list[int]:
    """The catalog's Xid codes that need ``action`` (alert rules select on these)."""
    return sorted(e.code for e in _ENTRIES if e.action is action)


def taint_effect(action: Action) -> str | None:
    """Effect of the health taint for ``action``; None where the node keeps taking work (no pydantic needed:
    the node-side programs plan with it)."""
    if action in (Action.ISOLATE, Action.REBOOT):
        # The GPU is gone or untrustworthy: evict running pods too.
        return "NoExecute"
    if action is Action.RESET_GPU:
        # A reset needs the GPU idle: stop new pods, let the operator drain the running ones.
        return "NoSchedule"
    return None


def taint_for(action: Action) -> Taint | None:
    """Kubernetes taint a node gets for ``action``; None where the node keeps taking work."""
    from gpufleet.spec import Taint
    effect = taint_effect(action)
    return None if effect is None else Taint(key=HEALTH_TAINT_KEY, value=action.value, effect=effect)


def drain_reason(action: Action, code: int | None = None, pci_bus_id: str | None = None) -> str | None:
    """Slurm ``scontrol update nodename=... state=drain reason=...`` text; None when no drain is needed."""
    if action not in (Action.ISOLATE, Action.REBOOT, Action.RESET_GPU):
        return None
    parts = [f"gpufleet:{action.value}"]
    if code is not None:
        parts.append(f"xid={code}({classify(code).mnemonic})")
    if pci_bus_id:
        parts.append(f"gpu={pci_bus_id}")
    return " ".join(parts)


@dataclass(frozen=True)
class XidEvent:
    """One ``NVRM: Xid`` line of the kernel log."""

    code: int
    pci_bus_id: str
    pid: int | None
    process: str | None
    message: str
    line: str

    @property
    def entry(self) -> XidEntry:
        return classify(self.code)

    @property
    def action(self) -> Action:
        return self.entry.action

    @property
    def severity(self) -> Severity:
        return self.entry.severity

    @property
    def taint(self) -> Taint | None:
        return taint_for(self.action)

    @property
    def drain_reason(self) -> str | None:
        return drain_reason(self.action, self.code, self.pci_bus_id)


# "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus."; before ~r470 the
# "PCI:" prefix is absent; MIG-era drivers may add instance ids before the ")".
_XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)[^)]*\):\s*"
    r"(?P<code>\d+),\s*(?P<rest>.*?)\s*$"
)
_PID = re.compile(r"^pid='?(?P<pid><unknown>|\d+)'?,\s*")
_NAME = re.compile(r"^name=(?P<name>[^,]*),\s*")


def parse_kernel_log(text: str) -> list[XidEvent]:
    """Xid events of ``dmesg``/``journalctl -k`` output, in log order; other lines are skipped."""
    events = []
    for raw in text.splitlines():
        m = _XID_LINE.search(raw)
        if not m:
            continue
        rest = m["rest"]
        pid: int | None = None
        process: str | None = None
        if pm := _PID.match(rest):
            pid = int(pm["pid"]) if pm["pid"].isdigit() else None
            rest = rest[pm.end():]
        if nm := _NAME.match(rest):
            process = None if nm["name"] in ("<unknown>", "") else nm["name"]
            rest = rest[nm.end():]
        events.append(XidEvent(int(m["code"]), m["pci"].lower(), pid, process, rest, raw.rstrip()))
    return events


def worst_action(events: list[XidEvent]) -> Action | None:
    """The most disruptive action any event needs; None for no events."""
    actions = {e.action for e in events}
    return next((a for a in ACTION_ORDER if a in actions), None)
