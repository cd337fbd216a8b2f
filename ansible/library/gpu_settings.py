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
      - Desired software power limit (what C(nvidia-smi -pl) sets), in gpufleet's one power-limit grammar
        (gpufleet/module_utils/power_limit.py) - whole watts (V(700)), a whole percentage of the GPU's default
        limit (V(90%)), V(default), V(min) or V(max). Fractions, units and other spellings are refused.
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

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_power_limit import PowerLimitError, parse_power_limit
from ansible.module_utils.gpufleet_smi_xml import SETTINGS, GpuInfo, SmiXmlError, parse_smi_xml


def target_power(request: str, gpu: GpuInfo) -> float:
    """Watts of a power limit request on this GPU, in the range it reports; ValueError with the reason otherwise."""
    return parse_power_limit(request).watts(
        default=gpu.power_default_w, minimum=gpu.power_min_w, maximum=gpu.power_max_w,
        where=f"GPU {gpu.index} ({gpu.pci_bus_id})")


def select(gpus: list[GpuInfo], wanted: list[str]) -> list[GpuInfo]:
    if not wanted:
        return gpus
    chosen: list[GpuInfo] = []
    for w in wanted:
        match = [g for g in gpus if str(g.index) == str(w) or g.uuid == w]
        if not match:
            raise ValueError(f"no GPU with index or UUID {w!r} (present: {[g.index for g in gpus]})")
        chosen.extend(m for m in match if m not in chosen)
    return chosen


def plan(gpus: list[GpuInfo], params: dict[str, Any]) -> list[dict[str, Any]]:
    """Per selected GPU: desired values that differ from the current ones. Raises ValueError before any change."""
    out = []
    for gpu in select(gpus, params.get("gpus") or []):
        want: dict[str, Any] = {}
        if params.get("persistence_mode") is not None and gpu.persistence_mode != params["persistence_mode"]:
            want["persistence_mode"] = bool(params["persistence_mode"])
        if params.get("power_limit"):
            watts = target_power(str(params["power_limit"]), gpu)
            # The software limit (what -pl sets), not the enforced one a platform cap may hold lower.
            if gpu.power_limit_w is None or abs(gpu.power_limit_w - watts) > 0.5:
                want["power_limit_w"] = watts
        clocks = params.get("application_clocks")
        if clocks:
            mem, gfx = int(clocks["memory"]), int(clocks["graphics"])
            if (gpu.app_clocks_memory_mhz, gpu.app_clocks_graphics_mhz) != (mem, gfx):
                want["clocks_memory_mhz"], want["clocks_graphics_mhz"] = mem, gfx
        out.append({"gpu": gpu, "want": want})
    return out


def _view(gpu: GpuInfo) -> dict[str, Any]:
    return {key: getattr(gpu, field) for key, field in SETTINGS.items()}


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

    def read() -> tuple[str | None, list[GpuInfo]]:
        rc, out, err = module.run_command([smi, "-q", "-x"])
        if rc != 0:
            module.fail_json(msg=f"nvidia-smi -q -x failed with exit {rc}: {(out + err).strip()}", rc=rc)
        try:
            report = parse_smi_xml(out)
        except SmiXmlError as e:
            module.fail_json(msg=f"nvidia-smi -q -x: {e}")
        return report.driver_version, report.gpus

    driver, gpus = read()
    try:
        steps = plan(gpus, module.params)
    except (PowerLimitError, ValueError) as e:
        module.fail_json(msg=str(e), gpus=[_view(g) for g in gpus])
    changed = any(s["want"] for s in steps)
    if changed and not module.check_mode:
        for s in steps:
            idx, want = str(s["gpu"].index), s["want"]
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
    after = {g.index: g for g in gpus}
    result = []
    for s in steps:
        g = s["gpu"]
        new = dict(_view(g), **s["want"]) if module.check_mode else _view(after[g.index])
        result.append({"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
                       "before": _view(g), "after": new, "changes": sorted(s["want"])})
    diff = {
        "before": "".join(f"GPU{r['index']}: {r['before']}\n" for r in result if r["changes"]),
        "after": "".join(f"GPU{r['index']}: {r['after']}\n" for r in result if r["changes"]),
    }
    module.exit_json(changed=changed, gpus=result, driver_version=driver, diff=diff)


if __name__ == "__main__":
    main()
