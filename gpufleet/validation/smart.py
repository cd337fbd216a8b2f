"""Parser of NVMe SMART / Health Information (log page 02h) as ``smartctl --json`` or ``nvme smart-log -o json``
prints it.

Field meanings are the NVMe base specification's, as libnvme's ``struct nvme_smart_log`` documents them
(https://manpages.ubuntu.com/manpages/noble/man2/nvme_smart_log.2.html): ``critical_warning`` is a bit field
(:data:`CRITICAL_WARNING_BITS`), ``avail_spare`` and ``spare_thresh`` are normalised percentages (an
asynchronous event fires when the spare falls below the threshold), ``percent_used`` is the vendor's estimate of
endurance used (may exceed 100), ``media_errors`` counts unrecovered data integrity errors.

* ``smartctl --json`` (smartmontools 7+): ``nvme_smart_health_information_log`` with long names
  (``available_spare``, ``available_spare_threshold``, ``percentage_used``), temperature in Celsius, device
  and model at the top, ``smart_status.passed``. Real captures: ``tests/fixtures/smart/`` (SOURCES.md).
* ``nvme smart-log -o json`` (nvme-cli): the short names at the top level, ``temperature`` in Kelvin;
  ``critical_warning`` is an integer, or an object with ``value`` in newer nvme-cli.

Every number must be a finite non-negative integer: NaN, Infinity, booleans and strings are refused (JSON
``NaN`` would otherwise compare false against every threshold and pass silently).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.parsers.errors import ParseError

#: NVMe critical warning bits (libnvme ``enum nvme_smart_crit``).
CRITICAL_WARNING_BITS: dict[int, str] = {
    0: "available spare below threshold",
    1: "temperature above or below a threshold",
    2: "NVM subsystem reliability degraded (media or internal errors)",
    3: "media placed in read-only mode",
    4: "volatile memory backup device failed",
    5: "persistent memory region read-only",
}


@dataclass(frozen=True)
class SmartReport:
    source: str  # "smartctl" | "nvme-cli"
    device: str | None
    model: str | None
    serial: str | None
    critical_warning: int
    temperature_c: int | None
    available_spare_pct: int
    spare_threshold_pct: int
    percentage_used: int
    media_errors: int
    error_log_entries: int | None
    power_on_hours: int | None
    #: smartctl's overall self-assessment; None for nvme-cli (it has none).
    smart_passed: bool | None

    @property
    def warning_bits(self) -> list[str]:
        return [name for bit, name in CRITICAL_WARNING_BITS.items() if self.critical_warning & (1 << bit)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["critical_warning_bits"] = self.warning_bits
        return d


def _refuse_constant(name: str) -> Any:
    raise ParseError(f"non-finite number {name} in SMART JSON: refused")


def _int(data: dict[str, Any], key: str, *, required: bool = True) -> int | None:
    if key not in data or data[key] is None:
        if required:
            raise ParseError(f"SMART log has no {key!r}")
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ParseError(f"{key} = {value!r}: expected a number")
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ParseError(f"{key} = {value!r}: expected a finite integer")
    if value < 0:
        raise ParseError(f"{key} = {value!r}: negative")
    return int(value)


def _critical_warning(value: Any) -> int:
    if isinstance(value, dict):  # newer nvme-cli: {"value": N, "available_spare": 0, ...}
        value = value.get("value")
    cw = _int({"critical_warning": value}, "critical_warning")
    assert cw is not None
    if cw > 0xFF:
        raise ParseError(f"critical_warning = {cw}: the field is one byte")
    return cw


def _pct(data: dict[str, Any], key: str, top: int = 255) -> int:
    v = _int(data, key)
    assert v is not None
    if v > top:
        raise ParseError(f"{key} = {v}: above {top}")
    return v


def parse_smart(text: str) -> SmartReport:
    """One NVMe device's SMART log, from ``smartctl --json`` or ``nvme smart-log -o json``."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise ParseError(f"not JSON ({e}); pass smartctl --json or nvme smart-log -o json output") from None
    if not isinstance(doc, dict):
        raise ParseError("SMART JSON is not an object")
    if "smartctl" in doc or "json_format_version" in doc:
        log = doc.get("nvme_smart_health_information_log")
        if not isinstance(log, dict):
            proto = (doc.get("device") or {}).get("protocol")
            msgs = [m.get("string", "") for m in (doc.get("smartctl") or {}).get("messages") or []
                    if isinstance(m, dict)]
            raise ParseError(f"smartctl output without an NVMe health log (device protocol {proto!r}); only NVMe "
                             "drives are judged", details=msgs)
        status = doc.get("smart_status") or {}
        passed = status.get("passed")
        return SmartReport(
            source="smartctl", device=(doc.get("device") or {}).get("name"), model=doc.get("model_name"),
            serial=doc.get("serial_number"), critical_warning=_critical_warning(log.get("critical_warning")),
            temperature_c=_int(log, "temperature", required=False),
            available_spare_pct=_pct(log, "available_spare"),
            spare_threshold_pct=_pct(log, "available_spare_threshold"),
            percentage_used=_pct(log, "percentage_used"),
            media_errors=_int(log, "media_errors") or 0,
            error_log_entries=_int(log, "num_err_log_entries", required=False),
            power_on_hours=_int(log, "power_on_hours", required=False),
            smart_passed=passed if isinstance(passed, bool) else None)
    if "avail_spare" in doc or "percent_used" in doc or "critical_warning" in doc:
        kelvin = _int(doc, "temperature", required=False)
        return SmartReport(
            source="nvme-cli", device=doc.get("device") if isinstance(doc.get("device"), str) else None,
            model=None, serial=None, critical_warning=_critical_warning(doc.get("critical_warning")),
            temperature_c=None if kelvin is None else kelvin - 273,
            available_spare_pct=_pct(doc, "avail_spare"), spare_threshold_pct=_pct(doc, "spare_thresh"),
            percentage_used=_pct(doc, "percent_used"), media_errors=_int(doc, "media_errors") or 0,
            error_log_entries=_int(doc, "num_err_log_entries", required=False),
            power_on_hours=_int(doc, "power_on_hours", required=False), smart_passed=None)
    raise ParseError("neither smartctl --json nor nvme smart-log -o json output (no nvme_smart_health_information_log,"
                     " no avail_spare/percent_used)", details=[", ".join(map(str, doc))[:200]])


@dataclass(frozen=True)
class SmartThresholds:
    """When SSD wear becomes a finding. Defaults: the spec's own threshold for the spare (the drive's
    ``spare_thresh``), plus a margin so the warning comes before the drive's asynchronous event."""

    #: percent_used at or above which a warning is raised (100: the vendor's rated endurance is consumed).
    percent_used_warning: int = 100
    #: percent_used at or above which an info finding plans the replacement.
    percent_used_info: int = 80
    #: spare within this many points above the drive's threshold: warning.
    spare_margin_pct: int = 10
