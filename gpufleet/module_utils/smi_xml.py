"""The one parser of ``nvidia-smi -q -x`` (XML): gpufleet's health checks, status and inspect read it through
gpufleet.parsers.smi_xml, the gpu_settings module as ``ansible.module_utils.gpufleet_smi_xml`` (a link to this
file, see gpufleet/module_utils/__init__.py), so both see the same fields with the same fallbacks.

Works across the DTD versions nvidia-smi has shipped (``nvsmi_device_v10.dtd`` .. ``v13``):

* power: ``power_readings`` (v10/v11: ``power_limit``, ``enforced_power_limit``, ``power_draw``) vs
  ``gpu_power_readings`` (v12+: ``requested_power_limit``, ``current_power_limit``, ``power_draw`` or
  ``average_power_draw``/``instant_power_draw`` from the 570 branch on); ``module_power_readings``
  (Grace Hopper module) is not a GPU's limit and is not read. Two limits are kept apart:
  ``power_limit_w`` is the software limit, what ``nvidia-smi -pl`` sets (NVML's power management limit:
  v10/v11 ``power_limit``, v12+ ``requested_power_limit``); ``power_limit_enforced_w`` is the limit in force
  after every limiter (NVML's enforced limit: v10/v11 ``enforced_power_limit``, v12+ ``current_power_limit``,
  which drops below the requested one when the platform or an out-of-band controller caps the board). Drift and
  health compare the software limit: it is what gpufleet sets; the enforced one moves with the platform;
* throttling: ``clocks_throttle_reasons`` (up to 525) vs ``clocks_event_reasons`` (530+);
* ECC: ``volatile/double_bit/total`` (Kepler..Volta layout) vs ``dram_uncorrectable`` +
  ``sram_uncorrectable`` (v11+), or ``sram_uncorrectable_parity`` + ``sram_uncorrectable_secded`` (v13);
* memory health: ``retired_pages`` (``pending_blacklist`` before ``pending_retirement``) vs
  ``remapped_rows`` (Ampere+; ``N/A`` on boards without row remapping).

Anything absent or reported as ``N/A`` (or another non-value such as ``Not Found``) becomes ``None``:
the parser never invents a value. Only the standard library XML parser is used; the DTD named in the
DOCTYPE is never fetched, and documents declaring entities are refused.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from typing import Any


class SmiXmlError(ValueError):
    """The text is not ``nvidia-smi -q -x`` output; gpufleet.parsers.smi_xml raises it as a ParseError."""

#: Texts nvidia-smi prints where it has no value; all read as None.
_NO_VALUE = {
    "",
    "n/a",
    "[n/a]",
    "not found",
    "not supported",
    "[not supported]",
    "unknown error",
    "[unknown error]",
    "requested functionality has been deprecated",
    "insufficient permissions",
}
#: The settings gpufleet's gpu_settings module manages: its reported key -> the GpuInfo field that holds it (drift
#: reads these keys; host_footprint's digest of a GPU is these fields).
SETTINGS = {
    "persistence_mode": "persistence_mode",
    "power_limit_w": "power_limit_w",
    "clocks_memory_mhz": "app_clocks_memory_mhz",
    "clocks_graphics_mhz": "app_clocks_graphics_mhz",
}
#: GPUs one capture may describe: the bound of module_utils/topology.py's MAX_GPUS (a module_utils file cannot
#: import another one on the node; tests/test_bad_inputs_round2.py checks the two agree). Each <gpu> becomes a
#: GpuInfo of ~40 lookups: half a million of them took 3 GiB and minutes.
MAX_GPUS = 64

# Digits bounded: nvidia-smi prints at most ~10 per number; 5000 would become inf, then int() overflows.
_NUMBER = re.compile(r"^\s*(-?\d{1,15}(?:\.\d{1,15})?)(?![\d.])")
_LONG_NUMBER = re.compile(r"^\s*-?[\d.]{32}")
_THROTTLE_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")


@dataclass(frozen=True)
class RemappedRows:
    pending: bool | None
    failure: bool | None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of ``nvidia-smi -q -x``; ``index`` is its position in the document (nvidia-smi's order)."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    serial: str | None
    vbios: str | None
    persistence_mode: bool | None
    mig_mode: str | None
    #: Software limit (what ``-pl`` sets); the enforced one below can be lower (platform or out-of-band caps).
    power_limit_w: float | None
    power_limit_enforced_w: float | None
    power_default_w: float | None
    power_min_w: float | None
    power_max_w: float | None
    power_draw_w: float | None
    ecc_mode: str | None
    ecc_dbe_volatile: int | None
    ecc_dbe_aggregate: int | None
    remapped_rows: RemappedRows | None
    retired_pages_pending: bool | None
    pcie_gen_current: int | None
    pcie_gen_max: int | None
    pcie_width_current: int | None
    pcie_width_max: int | None
    temperature_c: float | None
    throttle_reasons: list[str] | None
    utilization_gpu_pct: float | None
    app_clocks_graphics_mhz: int | None
    app_clocks_memory_mhz: int | None


@dataclass(frozen=True)
class SmiReport:
    driver_version: str | None
    cuda_version: str | None
    gpus: list[GpuInfo]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``gpufleet inspect smi-xml --json`` prints."""
        return asdict(self)


def _text(elem: ET.Element | None, path: str) -> str | None:
    """Text of a leaf below ``elem``; None when missing, a container, or a non-value such as N/A."""
    if elem is None:
        return None
    node = elem.find(path)
    if node is None or len(node):
        return None
    value = (node.text or "").strip()
    return None if value.lower() in _NO_VALUE else value


def _float(elem: ET.Element | None, path: str) -> float | None:
    value = _text(elem, path)
    if value and _LONG_NUMBER.match(value):
        raise SmiXmlError(f"<{path}> holds {value[:40]!r}...: not a number nvidia-smi prints")
    m = _NUMBER.match(value) if value else None
    return float(m.group(1)) if m else None


def _int(elem: ET.Element | None, path: str) -> int | None:
    value = _float(elem, path)
    return int(value) if value is not None else None


def _yes_no(elem: ET.Element | None, path: str) -> bool | None:
    value = _text(elem, path)
    if value is None:
        return None
    return {"yes": True, "no": False, "enabled": True, "disabled": False}.get(value.lower())


def _enabled(elem: ET.Element | None, path: str) -> str | None:
    value = _text(elem, path)
    return value if value in ("Enabled", "Disabled") else None


def _first(elem: ET.Element | None, *paths: str) -> float | None:
    for path in paths:
        value = _float(elem, path)
        if value is not None:
            return value
    return None


def _dbe(section: ET.Element | None) -> int | None:
    """Uncorrectable (double-bit) ECC errors of a ``volatile``/``aggregate`` block, None if unreported."""
    if section is None:
        return None
    if section.find("double_bit") is not None:
        return _int(section, "double_bit/total")
    parts = [
        _int(section, tag)
        for tag in (
            "dram_uncorrectable",
            "sram_uncorrectable",
            "sram_uncorrectable_parity",
            "sram_uncorrectable_secded",
        )
    ]
    known = [p for p in parts if p is not None]
    return sum(known) if known else None


def _remapped_rows(gpu: ET.Element) -> RemappedRows | None:
    node = gpu.find("remapped_rows")
    if node is None or not len(node):
        return None
    rows = RemappedRows(
        pending=_yes_no(node, "remapped_row_pending"),
        failure=_yes_no(node, "remapped_row_failure"),
    )
    return None if rows.pending is None and rows.failure is None else rows


def _retired_pages_pending(gpu: ET.Element) -> bool | None:
    # pending_blacklist is the pre-v11 name of pending_retirement; v11 prints both.
    flags = [
        f
        for f in (
            _yes_no(gpu, "retired_pages/pending_retirement"),
            _yes_no(gpu, "retired_pages/pending_blacklist"),
        )
        if f is not None
    ]
    return any(flags) if flags else None


def _throttle_reasons(gpu: ET.Element) -> list[str] | None:
    node = gpu.find("clocks_event_reasons")
    if node is None:
        node = gpu.find("clocks_throttle_reasons")
    if node is None:
        return None
    active = []
    for child in node:
        if (child.text or "").strip() == "Active":
            name = child.tag
            for prefix in _THROTTLE_PREFIXES:
                name = name.removeprefix(prefix)
            active.append(name)
    return active


def _gpu(index: int, gpu: ET.Element) -> GpuInfo:
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    link = gpu.find("pci/pci_gpu_link_info")
    return GpuInfo(
        index=index,
        name=_text(gpu, "product_name"),
        uuid=_text(gpu, "uuid"),
        pci_bus_id=gpu.get("id") or _text(gpu, "pci/pci_bus_id"),
        serial=_text(gpu, "serial"),
        vbios=_text(gpu, "vbios_version"),
        persistence_mode=_yes_no(gpu, "persistence_mode"),
        mig_mode=_enabled(gpu, "mig_mode/current_mig"),
        # Each limit from its own element only: the software limit is never guessed from the enforced one.
        power_limit_w=_first(power, "requested_power_limit", "power_limit"),
        power_limit_enforced_w=_first(power, "current_power_limit", "enforced_power_limit"),
        power_default_w=_float(power, "default_power_limit"),
        power_min_w=_float(power, "min_power_limit"),
        power_max_w=_float(power, "max_power_limit"),
        # Same reading `--query-gpu=power.draw` gives: the averaged one where the driver splits it.
        power_draw_w=_first(power, "power_draw", "average_power_draw", "instant_power_draw"),
        ecc_mode=_enabled(gpu, "ecc_mode/current_ecc"),
        ecc_dbe_volatile=_dbe(gpu.find("ecc_errors/volatile")),
        ecc_dbe_aggregate=_dbe(gpu.find("ecc_errors/aggregate")),
        remapped_rows=_remapped_rows(gpu),
        retired_pages_pending=_retired_pages_pending(gpu),
        pcie_gen_current=_int(link, "pcie_gen/current_link_gen"),
        pcie_gen_max=_int(link, "pcie_gen/max_link_gen"),
        pcie_width_current=_int(link, "link_widths/current_link_width"),
        pcie_width_max=_int(link, "link_widths/max_link_width"),
        temperature_c=_float(gpu, "temperature/gpu_temp"),
        throttle_reasons=_throttle_reasons(gpu),
        utilization_gpu_pct=_float(gpu, "utilization/gpu_util"),
        app_clocks_graphics_mhz=_int(gpu, "applications_clocks/graphics_clock"),
        app_clocks_memory_mhz=_int(gpu, "applications_clocks/mem_clock"),
    )


def parse_smi_xml(text: str) -> SmiReport:
    """Parse the output of ``nvidia-smi -q -x``; raise SmiXmlError when it is not one."""
    if "<!ENTITY" in text:
        # nvidia-smi never declares entities; refusing them closes the door on entity-expansion input.
        raise SmiXmlError("nvidia-smi XML must not declare entities (<!ENTITY found)")
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise SmiXmlError(f"not well-formed XML ({e}); is the nvidia-smi -q -x output complete?") from None
    if root.tag != "nvidia_smi_log":
        raise SmiXmlError(f"root element is <{root.tag}>, expected <nvidia_smi_log> (nvidia-smi -q -x)")
    gpus = root.findall("gpu")
    if len(gpus) > MAX_GPUS:
        raise SmiXmlError(f"{len(gpus)} <gpu> elements: a node has at most {MAX_GPUS} GPUs")
    return SmiReport(
        driver_version=_text(root, "driver_version"),
        cuda_version=_text(root, "cuda_version"),
        gpus=[_gpu(i, g) for i, g in enumerate(gpus)],
    )
