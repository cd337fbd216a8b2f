#!/usr/bin/python
"""Ansible module: set NVIDIA GPU persistence mode, power limit and application clocks, only where they differ."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_settings
short_description: Set persistence mode, power limit and application clocks of NVIDIA GPUs
description:
  - Reads the current state of every GPU from C(nvidia-smi -q -x) and changes only what differs from the request.
  - Requests outside a GPU's reported limits fail before anything is changed, naming the GPU, the value and the range.
  - Supports check mode and diff mode (per-GPU before/after).
options:
  gpus:
    description: GPUs to manage, by index or UUID. Empty means all GPUs.
    type: list
    elements: str
    default: []
  persistence_mode:
    description: Desired persistence mode. Omit to leave it alone.
    type: bool
  power_limit:
    description:
      - Desired power limit. Watts (V(700)), V(default), V(max), or a percentage of the default (V(90%)).
      - Omit to leave it alone.
    type: str
  application_clocks:
    description: Desired application clocks in MHz, keys C(memory) and C(graphics). Omit to leave them alone.
    type: dict
  nvidia_smi:
    description: Path of nvidia-smi.
    type: str
    default: nvidia-smi
author: gpufleet
"""

EXAMPLES = r"""
- name: Persistence on, power limit at 90% of default on every GPU
  gpu_settings:
    persistence_mode: true
    power_limit: "90%"

- name: GPUs 0 and 1 at 600 W
  gpu_settings:
    gpus: ["0", "1"]
    power_limit: "600"
"""

RETURN = r"""
gpus:
  description: Per-GPU state before and after, and what changed.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-5c3b3a6f-0000-0000-0000-000000000000
      pci_bus_id: "00000000:18:00.0"
      before: {persistence_mode: false, power_limit_w: 700.0}
      after: {persistence_mode: true, power_limit_w: 630.0}
      changes: [persistence_mode, power_limit_w]
driver_version:
  description: Driver version nvidia-smi reports.
  returned: success
  type: str
"""

import re
import xml.etree.ElementTree as ET
from typing import Any

from ansible.module_utils.basic import AnsibleModule

_NUM = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUM.match(text)
    return float(m.group(1)) if m else None


def _first(gpu: ET.Element, *paths: str) -> str | None:
    for path in paths:
        el = gpu.find(path)
        if el is not None and el.text is not None:
            return el.text.strip()
    return None


def parse_state(xml_text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The fields this module manages, per GPU, from ``nvidia-smi -q -x`` of any DTD version (v10..v13)."""
    root = ET.fromstring(xml_text)
    driver = root.findtext("driver_version")
    gpus = []
    for pos, gpu in enumerate(root.findall("gpu")):
        # Newer DTDs: gpu_power_readings/current_power_limit; older: power_readings/power_limit.
        def power(field: str, *, gpu: ET.Element = gpu) -> float | None:
            return _number(_first(gpu, f"gpu_power_readings/{field}", f"power_readings/{field}"))

        minor = _number(gpu.findtext("minor_number"))
        gpus.append({
            "index": int(minor) if minor is not None else pos,
            "uuid": (gpu.findtext("uuid") or "").strip(),
            "pci_bus_id": gpu.get("id", ""),
            "name": (gpu.findtext("product_name") or "").strip(),
            "persistence_mode": (gpu.findtext("persistence_mode") or "").strip() == "Enabled",
            "power_limit_w": power("current_power_limit") or power("power_limit"),
            "power_default_w": power("default_power_limit"),
            "power_min_w": power("min_power_limit"),
            "power_max_w": power("max_power_limit"),
            "clocks_graphics_mhz": _number(_first(gpu, "applications_clocks/graphics_clock")),
            "clocks_memory_mhz": _number(_first(gpu, "applications_clocks/mem_clock")),
        })
    return driver, gpus


def target_power(request: str, gpu: dict[str, Any]) -> float:
    """Watts for a request of ``700``, ``default``, ``max`` or ``90%``; ValueError with the reason otherwise."""
    req = request.strip().lower()
    default, lo, hi = gpu["power_default_w"], gpu["power_min_w"], gpu["power_max_w"]
    where = f"GPU {gpu['index']} ({gpu['pci_bus_id']})"
    if req == "default":
        if default is None:
            raise ValueError(f"{where} reports no default power limit")
        watts = float(default)
    elif req == "max":
        if hi is None:
            raise ValueError(f"{where} reports no maximum power limit")
        watts = float(hi)
    elif req.endswith("%"):
        pct = _number(req[:-1])
        if pct is None or default is None:
            raise ValueError(f"power_limit {request!r} needs a number before % and a default limit on {where}")
        watts = round(float(default) * pct / 100.0, 2)
    else:
        parsed = _number(req)
        if parsed is None or not re.fullmatch(r"[0-9]+(\.[0-9]+)?\s*w?", req):
            raise ValueError(f"power_limit {request!r} is not watts, 'default', 'max' or a percentage such as '90%'")
        watts = parsed
    if lo is not None and hi is not None and not (lo <= watts <= hi):
        raise ValueError(
            f"power_limit {request!r} = {watts:.2f} W is outside {where}'s range {lo:.2f}-{hi:.2f} W: "
            f"choose a value in that range"
        )
    return watts


def select(gpus: list[dict[str, Any]], wanted: list[str]) -> list[dict[str, Any]]:
    if not wanted:
        return gpus
    chosen = []
    for w in wanted:
        match = [g for g in gpus if str(g["index"]) == str(w) or g["uuid"] == w]
        if not match:
            raise ValueError(f"no GPU with index or UUID {w!r} (present: {[g['index'] for g in gpus]})")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def plan(gpus: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    """Per selected GPU: desired values that differ from the current ones. Raises ValueError before any change."""
    out = []
    for gpu in select(gpus, params.get("gpus") or []):
        want: dict[str, Any] = {}
        if params.get("persistence_mode") is not None and gpu["persistence_mode"] != params["persistence_mode"]:
            want["persistence_mode"] = bool(params["persistence_mode"])
        if params.get("power_limit"):
            watts = target_power(str(params["power_limit"]), gpu)
            if gpu["power_limit_w"] is None or abs(gpu["power_limit_w"] - watts) > 0.5:
                want["power_limit_w"] = watts
        clocks = params.get("application_clocks")
        if clocks:
            mem, gfx = int(clocks["memory"]), int(clocks["graphics"])
            if (gpu["clocks_memory_mhz"], gpu["clocks_graphics_mhz"]) != (mem, gfx):
                want["clocks_memory_mhz"], want["clocks_graphics_mhz"] = mem, gfx
        out.append({"gpu": gpu, "want": want})
    return out


def _view(gpu: dict[str, Any]) -> dict[str, Any]:
    return {k: gpu[k] for k in ("persistence_mode", "power_limit_w", "clocks_memory_mhz", "clocks_graphics_mhz")}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpus": {"type": "list", "elements": "str", "default": []},
            "persistence_mode": {"type": "bool"},
            "power_limit": {"type": "str"},
            "application_clocks": {"type": "dict"},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        },
        supports_check_mode=True,
    )
    smi = module.get_bin_path(module.params["nvidia_smi"], required=True)

    def read() -> tuple[str | None, list[dict[str, Any]]]:
        rc, out, err = module.run_command([smi, "-q", "-x"])
        if rc != 0:
            module.fail_json(msg=f"nvidia-smi -q -x failed with exit {rc}: {(out + err).strip()}", rc=rc)
        return parse_state(out)

    driver, gpus = read()
    try:
        steps = plan(gpus, module.params)
    except ValueError as e:
        module.fail_json(msg=str(e), gpus=[_view(g) for g in gpus])
    changed = any(s["want"] for s in steps)
    if changed and not module.check_mode:
        for s in steps:
            idx, want = str(s["gpu"]["index"]), s["want"]
            cmds = []
            if "persistence_mode" in want:
                cmds.append([smi, "-i", idx, "-pm", "1" if want["persistence_mode"] else "0"])
            if "power_limit_w" in want:
                cmds.append([smi, "-i", idx, "-pl", f"{want['power_limit_w']:.2f}"])
            if "clocks_memory_mhz" in want:
                cmds.append([smi, "-i", idx, "-ac", f"{want['clocks_memory_mhz']},{want['clocks_graphics_mhz']}"])
            for cmd in cmds:
                rc, out, err = module.run_command(cmd)
                if rc != 0:
                    module.fail_json(msg=f"{' '.join(cmd)} failed with exit {rc}: {(out + err).strip()}", rc=rc)
        driver, gpus = read()
    after = {g["index"]: g for g in gpus}
    result = []
    for s in steps:
        g = s["gpu"]
        new = dict(_view(g), **s["want"]) if module.check_mode else _view(after[g["index"]])
        result.append({"index": g["index"], "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"],
                       "before": _view(g), "after": new, "changes": sorted(s["want"])})
    diff = {
        "before": "".join(f"GPU{r['index']}: {r['before']}\n" for r in result if r["changes"]),
        "after": "".join(f"GPU{r['index']}: {r['after']}\n" for r in result if r["changes"]),
    }
    module.exit_json(changed=changed, gpus=result, driver_version=driver, diff=diff)


if __name__ == "__main__":
    main()
