"""Node health checks: pure functions over what the ``node_validation`` role collected.

The role gathers raw outputs on each node (``nvidia-smi -q -x``, the loaded module's version, the
installed driver packages, fabric manager's unit state, ``/proc/modules``, ``ibstat``, kernel-log Xid
lines) and hands them to the controller as one JSON bundle per host (``NodeData.from_bundle``). Every
judgement happens here, once: the role does not evaluate anything.

Each ``Finding`` has a severity and an action. Actions are the Xid catalog's (``gpufleet.validation.xid``:
isolate, reboot, reset-gpu, app-error, monitor), plus ``remediate`` for a node whose configuration moved
away from the stack (wrong driver, persistence off, power limit, fabric manager stopped): ``gpufleet
converge`` fixes it, the same action the drift alert carries. Actions map to a Kubernetes taint and a
Slurm drain reason exactly as Xids do (``xid.taint_for`` / ``xid.drain_reason``); remediate taints
``NoSchedule`` so running jobs finish.

Why each check has the severity it has:

==================  ========  ==========  ===================================================================
check               severity  action      why
==================  ========  ==========  ===================================================================
nvml                critical  reboot      nvidia-smi cannot talk to the driver ("Driver/library version
                                          mismatch" after an upgrade, or no driver loaded)
gpu-count           critical  reboot      fewer GPUs than the board has: one fell off the bus (Xid 79's
                                          RESTART_BM); more than the catalog: warning, check the pool's GPU
driver-loaded       critical  reboot      the loaded module is not the installed driver: a reboot loads it
driver-lock         critical  remediate   the installed driver is not the stack's lock (skew across nodes)
persistence         warning   remediate   persistence off: slow first CUDA call, settings lost on idle
power-limit         warning   remediate   a lower limit silently costs throughput
ecc-mode            critical  reset-gpu   ECC off on a datacenter GPU: silent corruption; enabling it needs
                                          ``nvidia-smi -e 1`` and a reset
ecc-dbe             critical  reset-gpu   volatile uncorrectable errors: NVIDIA's Xid 48 workflow resets
row-remap-pending   critical  reset-gpu   the remap takes effect at the next reset (NVIDIA memory error
                                          management guide)
row-remap-failure   critical  isolate     the bad row stays in service (Xid 64, alert GpuRowRemapFailure)
retired-pages       critical  reset-gpu   pre-Ampere page retirement pending until reset
hw-slowdown         critical  isolate     HW slowdown / power brake at rest: PSU, sensor or cooling fault
thermal             warning   monitor     SW thermal slowdown: the GPU runs hot (airflow, inlet temperature)
pcie-width          warning   monitor     link trained narrower than the device's maximum (slot, riser,
                                          reseat); may be the platform's slot, so not critical
pcie-gen            warning   monitor     link below max generation while busy; at idle GPUs downshift by
                                          design (info only)
fabric-manager      critical  remediate   NVSwitch boards without nvidia-fabricmanager fail CUDA init
                                          ("system not yet initialized")
peermem             critical  remediate   no GPUDirect RDMA without nvidia-peermem: inter-node bandwidth drops
ib-port             critical  isolate     an HCA port down or below the expected rate: cable/transceiver
topo-nvlink         critical  isolate     a GPU pair with fewer NVLinks than the board has (``topo -m`` NV#
                                          below the catalog's nvlinks_per_gpu_pair): a link or NVSwitch
                                          port is down, the node's all-reduce runs at the slowest pair
topo-nics           critical  isolate     fewer NICs behind the GPUs' PCIe switches than the board's rails
                                          (catalog rail_nics_per_node) on an RDMA pool: an HCA did not
                                          enumerate; NCCL would run the missing rail's GPUs over another
topo                warning   monitor     ``nvidia-smi topo -m`` failed or printed no matrix
xid-<code>          by catalog            NVIDIA's Xid catalog, one finding per code and GPU
==================  ========  ==========  ===================================================================
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from gpufleet.parsers.errors import ParseError
from gpufleet.parsers.smi_xml import GpuInfo, SmiReport, parse_smi_xml
from gpufleet.topology import Topology, parse_topo_m
from gpufleet.validation import xid
from gpufleet.validation.dcgm_diag import DiagReport, gpus_named, parse_dcgm_diag
from gpufleet.validation.ibstat import IbstatReport, parse_ibstat, select_hcas
from gpufleet.validation.smart import CRITICAL_WARNING_BITS, SmartReport, SmartThresholds, parse_smart
from gpufleet.validation.xid import HEALTH_TAINT_KEY, Severity

# Types only at import time: the Slurm health program (gpufleet.validation.node_check) runs these checks on a
# node with bare python3, without pydantic (which the catalog and gpufleet.spec need).
if TYPE_CHECKING:
    from gpufleet.catalog.model import GpuModel
    from gpufleet.spec import Taint

BUNDLE_SCHEMA = 1


class NodeAction(StrEnum):
    """What a finding asks for: the Xid catalog's actions plus ``remediate`` (re-converge the node)."""

    ISOLATE = "isolate"
    REBOOT = "reboot"
    RESET_GPU = "reset-gpu"
    REMEDIATE = "remediate"
    APP_ERROR = "app-error"
    MONITOR = "monitor"


#: Most to least disruptive: a node's action is the first any of its findings needs.
ACTION_ORDER = (NodeAction.ISOLATE, NodeAction.REBOOT, NodeAction.RESET_GPU, NodeAction.REMEDIATE,
                NodeAction.APP_ERROR, NodeAction.MONITOR)
SEVERITY_ORDER: tuple[Severity, ...] = ("critical", "warning", "info")


def taint_text(action: NodeAction) -> str | None:
    """``gpufleet.io/gpu-unhealthy=<action>:<effect>`` for ``action``, None where the node keeps taking work;
    without pydantic (the node-side programs plan with it): :func:`taint_for` is the same as a spec Taint."""
    effect = "NoSchedule" if action is NodeAction.REMEDIATE else xid.taint_effect(xid.Action(action.value))
    return None if effect is None else f"{HEALTH_TAINT_KEY}={action.value}:{effect}"


def taint_for(action: NodeAction) -> Taint | None:
    """Kubernetes taint for ``action``: the Xid catalog's, and NoSchedule for remediate."""
    from gpufleet.spec import Taint
    text = taint_text(action)
    if text is None:
        return None
    head, _, effect = text.rpartition(":")
    return Taint(key=HEALTH_TAINT_KEY, value=head.partition("=")[2], effect=effect)


def drain_reason(action: NodeAction, check: str, gpu: str | None = None, code: int | None = None) -> str | None:
    """Slurm drain reason, e.g. ``gpufleet:reset-gpu check=ecc-dbe gpu=00000000:1B:00.0``; None: no drain."""
    if action is NodeAction.REMEDIATE:
        base: str | None = f"gpufleet:{action.value}" + (f" gpu={gpu}" if gpu else "")
    else:
        base = xid.drain_reason(xid.Action(action.value), code, gpu)
    if base is None:
        return None
    head, _, rest = base.partition(" ")
    return " ".join(p for p in (head, f"check={check}", rest) if p)


@dataclass(frozen=True)
class Finding:
    check: str
    severity: Severity
    action: NodeAction
    message: str
    #: nvidia-smi index of the GPU concerned; None for node-wide findings.
    gpu: int | None = None
    pci_bus_id: str | None = None
    xid: int | None = None

    @property
    def taint(self) -> Taint | None:
        return taint_for(self.action) if self.severity == "critical" else None

    @property
    def drain_reason(self) -> str | None:
        if self.severity != "critical":
            return None
        return drain_reason(self.action, self.check, self.pci_bus_id, self.xid)

    def to_json(self) -> dict[str, Any]:
        taint = self.taint
        return {"check": self.check, "severity": self.severity, "action": self.action.value,
                "message": self.message, "gpu": self.gpu, "pci_bus_id": self.pci_bus_id, "xid": self.xid,
                "taint": None if taint is None else f"{taint.key}={taint.value}:{taint.effect}",
                "drain_reason": self.drain_reason}


@dataclass(frozen=True)
class CommandOutput:
    rc: int | None
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> CommandOutput | None:
        if not data:
            return None
        rc = data.get("rc")
        return cls(rc=None if rc is None else int(rc), stdout=str(data.get("stdout") or ""),
                   stderr=str(data.get("stderr") or data.get("msg") or ""))


@dataclass(frozen=True)
class NodeData:
    """Raw outputs of one node, as the ``node_validation`` role hands them over."""

    host: str
    pool: str | None
    nvidia_smi: CommandOutput | None
    #: Content of the loaded module's version file (/sys/module/nvidia/version); None: no module loaded.
    module_version: str | None
    #: ``dpkg-query -W -f='${Package}|${Version}|${db:Status-Abbrev}\\n'`` over the driver packages.
    driver_packages: CommandOutput | None
    #: systemd ActiveState of nvidia-fabricmanager (active, inactive, failed, ...); None: not collected.
    fabricmanager_state: str | None
    #: ``/proc/modules`` text; None when it could not be read.
    modules: str | None
    #: ``ibstat`` output; None when ibstat is not installed.
    ibstat: CommandOutput | None
    #: Kernel-log lines (already narrowed to ``NVRM: Xid`` lines by the role).
    kernel_log: str
    kernel_log_source: str = ""
    fabricmanager_installed: bool = True
    #: ``nvidia-smi topo -m``; None when the bundle has none (collected before topology was).
    topo: CommandOutput | None = None
    #: ``dcgmi diag -r N [-j]`` output; None when not run (level 1 in the quick checks, 3 only on request).
    dcgm_diag: CommandOutput | None = None
    #: Per NVMe device, ``smartctl --json`` or ``nvme smart-log -o json`` output (device name -> output).
    nvme_smart: Mapping[str, CommandOutput] = field(default_factory=dict)

    @classmethod
    def from_bundle(cls, bundle: Mapping[str, Any]) -> NodeData:
        """Read the role's JSON bundle (``node_validation`` tasks/report.yml documents the keys)."""
        schema = bundle.get("schema")
        if schema != BUNDLE_SCHEMA:
            raise ValueError(f"node_validation bundle schema {schema!r}, expected {BUNDLE_SCHEMA}")
        module = bundle.get("module_version") or {}
        ib = bundle.get("ibstat") or {}
        log = bundle.get("kernel_log") or {}
        return cls(
            host=str(bundle["host"]),
            pool=bundle.get("pool") or None,
            nvidia_smi=CommandOutput.from_json(bundle.get("nvidia_smi")),
            module_version=(str(module.get("content")).strip() or None) if module.get("present") else None,
            driver_packages=CommandOutput.from_json(bundle.get("driver_packages")),
            fabricmanager_state=(bundle.get("fabricmanager") or {}).get("state"),
            fabricmanager_installed=(bundle.get("fabricmanager") or {}).get("load_state") != "not-found",
            modules=bundle.get("modules"),
            ibstat=CommandOutput.from_json(ib) if ib.get("present") else None,
            kernel_log="\n".join(log.get("lines") or []),
            kernel_log_source=str(log.get("source") or ""),
            topo=CommandOutput.from_json(bundle.get("topo")),
            dcgm_diag=CommandOutput.from_json(bundle.get("dcgm_diag")),
            nvme_smart={str(dev): out for dev, raw in (bundle.get("nvme_smart") or {}).items()
                        if (out := CommandOutput.from_json(raw)) is not None},
        )


@dataclass(frozen=True)
class Expectations:
    """What a node of a pool should look like, from the stack (spec + lock + catalog)."""

    model: GpuModel | None
    driver_version: str | None
    persistence_mode: bool | None = True
    #: Watts, resolved from the pool's power_limit with GpuModel.resolve_power_limit; None: not managed.
    power_limit_w: float | None = None
    fabric: str = "none"
    #: NCCL_IB_HCA value selecting the data-plane HCAs (None: every port of the fabric's link layer).
    ib_hca: str | None = None
    #: Expected port rate (Gb/s); None: the fastest rate seen on the node's selected ports.
    ib_rate_gbps: int | None = None
    #: GPUs expected on the node; None: the catalog's gpus_per_node.
    gpu_count: int | None = None
    #: NVSwitch board without a catalog model (the node's health program has no catalog); None: the model's.
    nvswitch: bool | None = None


@dataclass
class NodeHealth:
    host: str
    pool: str | None
    findings: list[Finding] = field(default_factory=list)
    gpus: int | None = None
    driver: str | None = None
    loaded_module: str | None = None
    xid_events: int = 0

    @property
    def status(self) -> str:
        """critical | warning | ok (info findings do not change a node's status)."""
        sev = {f.severity for f in self.findings}
        return "critical" if "critical" in sev else "warning" if "warning" in sev else "ok"

    @property
    def action(self) -> NodeAction | None:
        """The most disruptive action the node's critical and warning findings need."""
        acts = {f.action for f in self.findings if f.severity != "info"}
        return next((a for a in ACTION_ORDER if a in acts), None)

    @property
    def taint(self) -> Taint | None:
        crit = [f for f in self.findings if f.severity == "critical"]
        acts = {f.action for f in crit}
        worst = next((a for a in ACTION_ORDER if a in acts), None)
        return taint_for(worst) if worst is not None else None

    @property
    def taint_text(self) -> str | None:
        """:attr:`taint` as ``key=value:effect``, without pydantic."""
        crit = {f.action for f in self.findings if f.severity == "critical"}
        worst = next((a for a in ACTION_ORDER if a in crit), None)
        return taint_text(worst) if worst is not None else None

    @property
    def drain_reason(self) -> str | None:
        crit = sorted((f for f in self.findings if f.severity == "critical"),
                      key=lambda f: ACTION_ORDER.index(f.action))
        return crit[0].drain_reason if crit else None

    def to_json(self) -> dict[str, Any]:
        taint = self.taint
        return {
            "host": self.host, "pool": self.pool, "status": self.status,
            "action": None if self.action is None else self.action.value,
            "taint": None if taint is None else f"{taint.key}={taint.value}:{taint.effect}",
            "drain_reason": self.drain_reason, "gpus": self.gpus, "driver": self.driver,
            "loaded_module": self.loaded_module, "xid_events": self.xid_events,
            "findings": [f.to_json() for f in self.findings],
        }


# --- individual checks -------------------------------------------------------------------------------

def _f(check: str, severity: Severity, action: NodeAction, message: str, gpu: GpuInfo | None = None,
       code: int | None = None) -> Finding:
    return Finding(check, severity, action, message, gpu.index if gpu else None,
                   gpu.pci_bus_id if gpu else None, code)


def check_gpu_count(smi: SmiReport, exp: Expectations) -> list[Finding]:
    want = exp.gpu_count if exp.gpu_count is not None else (exp.model.gpus_per_node if exp.model else None)
    if want is None or len(smi.gpus) == want:
        return []
    have = len(smi.gpus)
    if have < want:
        return [_f("gpu-count", "critical", NodeAction.REBOOT,
                   f"{have} GPUs visible, expected {want}: a GPU is missing (fell off the bus?); reboot, "
                   f"isolate if it stays missing")]
    return [_f("gpu-count", "warning", NodeAction.MONITOR,
               f"{have} GPUs visible, expected {want}: check the pool's GPU model in the stack")]


def check_gpu_model(smi: SmiReport, exp: Expectations) -> list[Finding]:
    if exp.model is None:
        return []
    return [_f("gpu-model", "warning", NodeAction.MONITOR,
               f"GPU is {g.name!r}, the pool's model is {exp.model.name!r}", g)
            for g in smi.gpus if g.name is not None and g.name != exp.model.name]


def installed_driver_versions(output: CommandOutput | None) -> list[str]:
    """Upstream versions (``570.172.08``) of installed driver packages in ``dpkg-query`` output."""
    versions: set[str] = set()
    if output is None:
        return []
    for line in output.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or len(parts[2].strip()) < 2 or parts[2].strip()[1] != "i":
            continue  # not installed ("un", "rc")
        version = parts[1].split(":", 1)[-1]  # drop an epoch
        versions.add(version.rsplit("-", 1)[0] if "-" in version else version)
    return sorted(versions)


def check_driver(data: NodeData, smi: SmiReport | None, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    installed = installed_driver_versions(data.driver_packages)
    if len(installed) > 1:
        out.append(_f("driver-lock", "critical", NodeAction.REMEDIATE,
                      f"driver packages at several versions {installed}: converge to {exp.driver_version}"))
    current = installed[0] if len(installed) == 1 else (smi.driver_version if smi else None)
    if exp.driver_version and current and current != exp.driver_version:
        out.append(_f("driver-lock", "critical", NodeAction.REMEDIATE,
                      f"installed driver {current}, the stack's lock has {exp.driver_version}: "
                      f"run gpufleet converge"))
    if exp.driver_version and not installed and smi is None:
        out.append(_f("driver-lock", "critical", NodeAction.REMEDIATE,
                      f"no driver package installed (lock: {exp.driver_version}): run gpufleet converge"))
    if data.module_version and current and data.module_version != current:
        out.append(_f("driver-loaded", "critical", NodeAction.REBOOT,
                      f"loaded kernel module {data.module_version}, installed driver {current}: reboot to load "
                      f"the installed one"))
    return out


def check_persistence(gpu: GpuInfo, exp: Expectations) -> list[Finding]:
    if exp.persistence_mode is None or gpu.persistence_mode is None or gpu.persistence_mode == exp.persistence_mode:
        return []
    want = "on" if exp.persistence_mode else "off"
    return [_f("persistence", "warning", NodeAction.REMEDIATE,
               f"GPU {gpu.index}: persistence mode {'on' if gpu.persistence_mode else 'off'}, configured {want}",
               gpu)]


def check_power_limit(gpu: GpuInfo, exp: Expectations) -> list[Finding]:
    if exp.power_limit_w is None or gpu.power_limit_w is None:
        return []
    # nvidia-smi prints two decimals; anything beyond rounding is a different limit.
    if abs(gpu.power_limit_w - exp.power_limit_w) <= 0.5:
        return []
    return [_f("power-limit", "warning", NodeAction.REMEDIATE,
               f"GPU {gpu.index}: power limit {gpu.power_limit_w:g} W, configured {exp.power_limit_w:g} W", gpu)]


def check_memory(gpu: GpuInfo) -> list[Finding]:
    out: list[Finding] = []
    if gpu.ecc_mode == "Disabled":
        out.append(_f("ecc-mode", "critical", NodeAction.RESET_GPU,
                      f"GPU {gpu.index}: ECC disabled; enable it (nvidia-smi -i {gpu.index} -e 1) and reset", gpu))
    if gpu.ecc_dbe_volatile:
        out.append(_f("ecc-dbe", "critical", NodeAction.RESET_GPU,
                      f"GPU {gpu.index}: {gpu.ecc_dbe_volatile} volatile uncorrectable (double-bit) ECC errors "
                      f"since the last reset", gpu))
    if gpu.remapped_rows is not None:
        if gpu.remapped_rows.failure:
            out.append(_f("row-remap-failure", "critical", NodeAction.ISOLATE,
                          f"GPU {gpu.index}: row remapping failed; the GPU needs service (RMA)", gpu))
        if gpu.remapped_rows.pending:
            out.append(_f("row-remap-pending", "critical", NodeAction.RESET_GPU,
                          f"GPU {gpu.index}: a row remap is pending until the GPU is reset", gpu))
    if gpu.retired_pages_pending:
        out.append(_f("retired-pages", "critical", NodeAction.RESET_GPU,
                      f"GPU {gpu.index}: page retirement pending until the GPU is reset", gpu))
    return out


#: Clock event reasons that mean hardware is holding the GPU back (names as gpufleet.parsers.smi_xml gives them).
HW_SLOWDOWN = ("hw_slowdown", "hw_power_brake_slowdown", "hw_thermal_slowdown")
THERMAL = ("sw_thermal_slowdown",)


def check_throttle(gpu: GpuInfo) -> list[Finding]:
    reasons = gpu.throttle_reasons or []
    out: list[Finding] = []
    hw = [r for r in reasons if r in HW_SLOWDOWN]
    if hw:
        out.append(_f("hw-slowdown", "critical", NodeAction.ISOLATE,
                      f"GPU {gpu.index}: active {', '.join(hw)}: hardware is slowing the GPU down (power brake, "
                      f"PSU or cooling); inspect the node", gpu))
    thermal = [r for r in reasons if r in THERMAL]
    if thermal:
        temp = f" at {gpu.temperature_c:g} C" if gpu.temperature_c is not None else ""
        out.append(_f("thermal", "warning", NodeAction.MONITOR,
                      f"GPU {gpu.index}: thermal slowdown active{temp}", gpu))
    return out


def _idle(gpu: GpuInfo) -> bool:
    return "gpu_idle" in (gpu.throttle_reasons or []) or gpu.utilization_gpu_pct == 0


def check_pcie(gpu: GpuInfo) -> list[Finding]:
    out: list[Finding] = []
    if gpu.pcie_width_current is not None and gpu.pcie_width_max is not None \
            and gpu.pcie_width_current < gpu.pcie_width_max:
        out.append(_f("pcie-width", "warning", NodeAction.MONITOR,
                      f"GPU {gpu.index}: PCIe link x{gpu.pcie_width_current} of x{gpu.pcie_width_max}: check "
                      f"the slot/riser, reseat", gpu))
    if gpu.pcie_gen_current is not None and gpu.pcie_gen_max is not None and gpu.pcie_gen_current < gpu.pcie_gen_max:
        if _idle(gpu):
            out.append(_f("pcie-gen", "info", NodeAction.MONITOR,
                          f"GPU {gpu.index}: PCIe gen {gpu.pcie_gen_current} of {gpu.pcie_gen_max} while idle "
                          f"(GPUs downshift at idle); recheck under load", gpu))
        else:
            out.append(_f("pcie-gen", "warning", NodeAction.MONITOR,
                          f"GPU {gpu.index}: PCIe gen {gpu.pcie_gen_current} of {gpu.pcie_gen_max} under load",
                          gpu))
    return out


def check_fabric_manager(data: NodeData, exp: Expectations) -> list[Finding]:
    nvswitch = exp.model.nvswitch if exp.model is not None else bool(exp.nvswitch)
    if not nvswitch:
        return []
    state = data.fabricmanager_state or "unknown"
    if not data.fabricmanager_installed:
        state = "not installed"
    if state == "active":
        return []
    board = exp.model.name if exp.model is not None else "NVSwitch"
    return [_f("fabric-manager", "critical", NodeAction.REMEDIATE,
               f"nvidia-fabricmanager is {state} on an NVSwitch board ({board}): CUDA cannot initialise "
               f"the GPUs; install/start it at the driver's version")]


def loaded_modules(text: str | None) -> set[str]:
    return {line.split()[0] for line in (text or "").splitlines() if line.split()}


def check_rdma(data: NodeData, exp: Expectations) -> list[Finding]:
    if exp.fabric not in ("infiniband", "roce"):
        return []
    out: list[Finding] = []
    if data.modules is not None and "nvidia_peermem" not in loaded_modules(data.modules):
        out.append(_f("peermem", "critical", NodeAction.REMEDIATE,
                      "nvidia-peermem is not loaded: no GPUDirect RDMA (modprobe nvidia-peermem, and load it at "
                      "boot)"))
    if exp.fabric == "roce" and not exp.ib_hca:
        return out  # Without NCCL_IB_HCA the data ports cannot be told from management Ethernet ports.
    if data.ibstat is None:
        out.append(_f("ib-port", "warning", NodeAction.REMEDIATE,
                      f"ibstat is not installed: cannot check the {exp.fabric} ports (install infiniband-diags)"))
        return out
    try:
        report: IbstatReport = parse_ibstat(data.ibstat.stdout)
    except ParseError as e:
        out.append(_f("ib-port", "critical", NodeAction.ISOLATE,
                      f"ibstat failed (rc {data.ibstat.rc}): {str(e).splitlines()[0]} "
                      f"{data.ibstat.stderr.strip()[:200]}".strip()))
        return out
    out.extend(check_ib_ports(report, exp, data.ibstat.rc))
    return out


def check_ib_ports(report: IbstatReport, exp: Expectations, rc: int | None = 0) -> list[Finding]:
    layer = "InfiniBand" if exp.fabric == "infiniband" else "Ethernet"
    ports = [p for p in select_hcas(report.ports, exp.ib_hca) if p.link_layer == layer]
    out: list[Finding] = []
    if report.errors or (rc not in (0, None)):
        out.append(_f("ib-port", "warning", NodeAction.MONITOR,
                      f"ibstat exited {rc}: {'; '.join(report.errors) or 'no message'}"))
    if not ports:
        out.append(_f("ib-port", "critical", NodeAction.ISOLATE,
                      f"no {layer} HCA port found" + (f" matching NCCL_IB_HCA={exp.ib_hca}" if exp.ib_hca else "")))
        return out
    # Without a configured rate the fastest active port sets it: one slow port among fast ones is the fault.
    rate = exp.ib_rate_gbps or max((p.rate_gbps or 0 for p in ports if p.active), default=0) or None
    for p in ports:
        if not p.active:
            out.append(_f("ib-port", "critical", NodeAction.ISOLATE,
                          f"{p.name}: {p.state}/{p.physical_state}, expected Active/LinkUp: check cable and "
                          f"transceiver"))
        elif rate and (p.rate_gbps or 0) < rate:
            out.append(_f("ib-port", "critical", NodeAction.ISOLATE,
                          f"{p.name}: rate {p.rate_gbps} Gb/s, expected {rate} Gb/s: check cable and transceiver"))
    return out


def check_topology(data: NodeData, smi: SmiReport | None, exp: Expectations) -> list[Finding]:
    """The node's ``topo -m`` against the catalog: NVLinks per GPU pair, and rail NICs on RDMA pools."""
    if data.topo is None:
        return []
    if not data.topo.ok:
        detail = (data.topo.stdout + data.topo.stderr).strip()[:200]
        return [_f("topo", "warning", NodeAction.MONITOR,
                   f"nvidia-smi topo -m failed (rc {data.topo.rc}): {detail or 'no output'}")]
    try:
        topo = parse_topo_m(data.topo.stdout)
    except ParseError as e:
        return [_f("topo", "warning", NodeAction.MONITOR, f"nvidia-smi topo -m unreadable: {str(e).splitlines()[0]}")]
    return check_topology_model(topo, smi, exp)


def check_topology_model(topo: Topology, smi: SmiReport | None, exp: Expectations) -> list[Finding]:
    out: list[Finding] = []
    if exp.model is None:
        return out
    by_index = {g.index: g for g in (smi.gpus if smi else [])}
    want = exp.model.nvlinks_per_gpu_pair
    if want:
        indices = [topo.gpu_index(g) for g in topo.gpu_labels]
        for i in indices:
            links = topo.nvlink(i)
            short = {j: links.get(j, 0) for j in indices if j != i and links.get(j, 0) < want}
            if short:
                pairs = ", ".join(f"GPU {j}: {'NV' + str(n) if n else 'no NVLink'}" for j, n in short.items())
                out.append(_f("topo-nvlink", "critical", NodeAction.ISOLATE,
                              f"GPU {i}: {pairs}; the {exp.model.name} board has NV{want} between every pair "
                              f"(a link or NVSwitch port is down; check nvidia-smi nvlink -s)", by_index.get(i)))
    rails = exp.model.rail_nics_per_node
    if rails and exp.fabric in ("infiniband", "roce"):
        have = topo.rail_nics()
        if len(have) < rails:
            bare = [topo.gpu_index(g) for g in topo.gpu_labels
                    if not any(topo.cell(g, n) in ("PIX", "PXB") for n in topo.nic_labels)]
            out.append(_f("topo-nics", "critical", NodeAction.ISOLATE,
                          f"{len(have)} NICs behind the GPUs' PCIe switches ({', '.join(have) or 'none'}), the "
                          f"{exp.model.name} board has {rails} rails; GPUs without one: "
                          f"{', '.join(map(str, bare)) or '-'} (an HCA did not enumerate: check lspci, firmware)"))
    return out


def _bus_key(pci: str | None) -> str | None:
    """``00000000:1B:00.0`` and Xid's ``0000:1b:00`` compare on bus:device."""
    if not pci:
        return None
    m = re.search(r"([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-7])?$", pci)
    return f"{m.group(1)}:{m.group(2)}".lower() if m else None


def check_xids(log: str, smi: SmiReport | None) -> tuple[list[Finding], int]:
    events = xid.parse_kernel_log(log)
    by_bus = {_bus_key(g.pci_bus_id): g for g in (smi.gpus if smi else [])}
    counts = Counter((e.code, e.pci_bus_id) for e in events)
    out: list[Finding] = []
    for (code, pci), n in counts.items():
        entry = xid.classify(code)
        gpu = by_bus.get(_bus_key(pci))
        where = f"GPU {gpu.index} ({pci})" if gpu else pci
        out.append(Finding(
            f"xid-{code}", entry.severity, NodeAction(entry.action.value),
            f"{where}: Xid {code} {entry.mnemonic} x{n} ({entry.description}); NVIDIA: {entry.nvidia_resolution}",
            gpu.index if gpu else None, gpu.pci_bus_id if gpu else pci, code))
    return out, len(events)


#: Deployment tests whose failure is configuration (re-converge fixes it), and the two that are the hardware's.
DCGM_DEPLOYMENT_ACTIONS = {"Page Retirement/Row Remap": NodeAction.RESET_GPU, "Inforom": NodeAction.ISOLATE}
#: DCGM's wording when CUDA cannot initialise; on NVSwitch boards the usual cause is fabric manager not running
#: (the 3.3.8 level-3 capture in ../shared/fixtures/real/dcgm, nccl-tests issue #264).
_CUINIT = re.compile(r"cuInit.*system not yet initialized", re.IGNORECASE | re.DOTALL)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def check_dcgm_diag(report: DiagReport) -> list[Finding]:
    """Findings of a ``dcgmi diag`` run, named by NVIDIA's category and test (``dcgm-hardware-gpu-memory``).

    Fail: critical. Deployment failures are configuration (remediate) except row remap/page retirement
    (reset-gpu) and the inforom (isolate); Integration, Hardware, Stress, Performance and Custom failures are the
    board's (isolate), unless CUDA failed to initialise with "system not yet initialized" (remediate: start
    nvidia-fabricmanager, as the ``fabric-manager`` check says). Warn: warning/monitor. Skip and not-run: info,
    so a level-3 run cut short by ``--fail-early`` says what was never tested.
    """
    out: list[Finding] = []
    for r in report.results:
        check = f"dcgm-{_slug(r.category)}-{_slug(r.test)}"
        where = f"DCGM {report.dcgm_version or '?'} level {report.level or '?'} {r.category}/{r.test}"
        if r.status == "fail":
            if r.category == "Deployment":
                action = DCGM_DEPLOYMENT_ACTIONS.get(r.test, NodeAction.REMEDIATE)
            elif any(_CUINIT.search(w) for w in r.warnings):
                action = NodeAction.REMEDIATE
            else:
                action = NodeAction.ISOLATE
            for gpu in gpus_named(r):
                detail = next((w for w in r.warnings if gpu is None or re.match(rf"GPU {gpu}\b", w)),
                              r.warnings[0] if r.warnings else "")
                hint = " (CUDA not initialised: on NVSwitch boards start nvidia-fabricmanager)" \
                    if _CUINIT.search(detail) else ""
                out.append(Finding(check, "critical", action,
                                   f"{where}: Fail{'' if gpu is None else f' on GPU {gpu}'}{hint}"
                                   + (f": {detail[:300]}" if detail else ""), gpu))
        elif r.status == "warn":
            out.append(Finding(check, "warning", NodeAction.MONITOR,
                               f"{where}: Warn: {'; '.join(r.warnings)[:300] or 'no detail'}",
                               r.gpus[0] if r.gpus and len(r.gpus) == 1 else None))
        elif r.status in ("skip", "not-run") and not any(f.check == check for f in out):
            out.append(Finding(check, "info", NodeAction.MONITOR, f"{where}: {r.status}, not tested"))
    return out


def check_dcgm_output(output: CommandOutput) -> list[Finding]:
    """The bundle's ``dcgm_diag``: unreadable output is a warning (the diagnostic, not the GPU, failed)."""
    try:
        return check_dcgm_diag(parse_dcgm_diag(output.stdout))
    except ParseError as e:
        return [Finding("dcgm-diag", "warning", NodeAction.MONITOR,
                        f"dcgmi diag (rc {output.rc}) output unreadable: {str(e).splitlines()[0]}")]


#: Critical-warning bits that mean the drive must be replaced (isolate); the others are warnings (monitor).
SMART_CRITICAL_BITS = (0, 2, 3, 4)
SMART_DEFAULTS = SmartThresholds()


def check_smart(report: SmartReport, device: str | None = None,
                limits: SmartThresholds = SMART_DEFAULTS) -> list[Finding]:
    """Findings of one NVMe drive's SMART log (check names ``ssd-*``; the node's local scratch/cache).

    critical/isolate: critical-warning bit 0 (spare below threshold), 2 (reliability degraded), 3 (read-only),
    4 (volatile memory backup failed); available spare below the drive's threshold; smartctl's self-assessment
    FAILED. warning/monitor: bits 1 (temperature) and 5 (PMR read-only); spare within ``spare_margin_pct`` of the
    threshold; ``percent_used`` at ``percent_used_warning``; media errors > 0 (unrecovered data integrity errors:
    smartctl still says PASSED for the 970 EVO capture with 7 of them, so not critical, but a cache on that drive
    may hand back corrupt data). info: ``percent_used`` at ``percent_used_info``.
    """
    dev = device or report.device or "nvme"
    out: list[Finding] = []

    def add(check: str, severity: Severity, action: NodeAction, message: str) -> None:
        out.append(Finding(check, severity, action, f"{dev}"
                           f"{f' ({report.model})' if report.model else ''}: {message}"))

    for bit, name in CRITICAL_WARNING_BITS.items():
        if not report.critical_warning & (1 << bit):
            continue
        crit = bit in SMART_CRITICAL_BITS
        add(f"ssd-critical-warning-{bit}", "critical" if crit else "warning",
            NodeAction.ISOLATE if crit else NodeAction.MONITOR,
            f"critical warning bit {bit}: {name} (critical_warning=0x{report.critical_warning:02x})")
    spare, thresh = report.available_spare_pct, report.spare_threshold_pct
    if spare < thresh:
        add("ssd-spare", "critical", NodeAction.ISOLATE, f"available spare {spare}% below the threshold {thresh}%")
    elif spare <= thresh + limits.spare_margin_pct and thresh > 0:
        add("ssd-spare", "warning", NodeAction.MONITOR,
            f"available spare {spare}% within {limits.spare_margin_pct} points of the threshold {thresh}%")
    if report.smart_passed is False:
        add("ssd-smart-status", "critical", NodeAction.ISOLATE, "smartctl's SMART self-assessment: FAILED")
    used = report.percentage_used
    if used >= limits.percent_used_warning:
        add("ssd-wear", "warning", NodeAction.MONITOR,
            f"{used}% of the rated endurance used (>= {limits.percent_used_warning}%): replace the drive")
    elif used >= limits.percent_used_info:
        add("ssd-wear", "info", NodeAction.MONITOR, f"{used}% of the rated endurance used: plan a replacement")
    if report.media_errors > 0:
        add("ssd-media-errors", "warning", NodeAction.MONITOR,
            f"{report.media_errors} media and data integrity errors"
            + (f", {report.error_log_entries} error log entries" if report.error_log_entries else ""))
    return out


def check_smart_outputs(outputs: Mapping[str, CommandOutput], limits: SmartThresholds = SMART_DEFAULTS
                        ) -> list[Finding]:
    """The bundle's ``nvme_smart``: unreadable output is a warning naming the device."""
    out: list[Finding] = []
    for dev, output in sorted(outputs.items()):
        try:
            out.extend(check_smart(parse_smart(output.stdout), dev, limits))
        except ParseError as e:
            out.append(Finding("ssd-smart", "warning", NodeAction.MONITOR,
                               f"{dev}: SMART output (rc {output.rc}) unreadable: {str(e).splitlines()[0]}"))
    return out


def evaluate_node(data: NodeData, exp: Expectations) -> NodeHealth:
    """Every check over one node's raw data."""
    health = NodeHealth(data.host, data.pool, loaded_module=data.module_version)
    smi: SmiReport | None = None
    if data.nvidia_smi is None or not data.nvidia_smi.ok:
        detail = (data.nvidia_smi.stdout + data.nvidia_smi.stderr).strip()[:300] if data.nvidia_smi else "not run"
        rc = data.nvidia_smi.rc if data.nvidia_smi else None
        health.findings.append(_f("nvml", "critical", NodeAction.REBOOT,
                                  f"nvidia-smi failed (rc {rc}): {detail or 'no output'}"))
    else:
        try:
            smi = parse_smi_xml(data.nvidia_smi.stdout)
        except ParseError as e:
            health.findings.append(_f("nvml", "critical", NodeAction.REBOOT,
                                      f"nvidia-smi -q -x output unreadable: {str(e).splitlines()[0]}"))
    installed = installed_driver_versions(data.driver_packages)
    health.driver = installed[0] if len(installed) == 1 else (smi.driver_version if smi else None)
    health.findings.extend(check_driver(data, smi, exp))
    if smi is not None:
        health.gpus = len(smi.gpus)
        health.findings.extend(check_gpu_count(smi, exp))
        health.findings.extend(check_gpu_model(smi, exp))
        for gpu in smi.gpus:
            health.findings.extend(check_persistence(gpu, exp))
            health.findings.extend(check_power_limit(gpu, exp))
            health.findings.extend(check_memory(gpu))
            health.findings.extend(check_throttle(gpu))
            health.findings.extend(check_pcie(gpu))
    health.findings.extend(check_fabric_manager(data, exp))
    health.findings.extend(check_rdma(data, exp))
    health.findings.extend(check_topology(data, smi, exp))
    if data.dcgm_diag is not None:
        health.findings.extend(check_dcgm_output(data.dcgm_diag))
    health.findings.extend(check_smart_outputs(data.nvme_smart))
    xid_findings, n_events = check_xids(data.kernel_log, smi)
    health.findings.extend(xid_findings)
    health.xid_events = n_events
    health.findings.sort(key=lambda f: (SEVERITY_ORDER.index(f.severity), ACTION_ORDER.index(f.action),
                                        f.gpu if f.gpu is not None else -1, f.check))
    return health


def unreachable(host: str, pool: str | None, why: str) -> NodeHealth:
    """A node the role could not collect from: critical, so it is never counted healthy."""
    return NodeHealth(host, pool, findings=[_f("collect", "critical", NodeAction.REBOOT,
                                               f"no data collected: {why}")])
