#!/usr/bin/python
"""Ansible module: read, and set, the cpufreq governor of every CPU (one run; drift names the CPUs that differ)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: cpu_governor
short_description: Read and set the cpufreq scaling governor of every CPU
description:
  - Reads C(<sysfs>/cpuN/cpufreq/scaling_governor) of every CPU and sets the ones that differ from O(governor).
  - Returns the CPUs that differed with the governor they had, so check mode (gpufleet drift) names them.
  - CPUs without a cpufreq directory (VMs, cpufreq not loaded) have nothing to set; with none at all the module
    returns O(present=false) and changes nothing.
options:
  governor:
    description: The governor every CPU must have (e.g. performance).
    type: str
    required: true
  sysfs:
    description: The CPU directory (a stand-in directory where /sys is read-only, e.g. containers).
    type: path
    default: /sys/devices/system/cpu
  apply:
    description:
      - Set the CPUs that differ. False only reads (changed false outside check mode, the CPUs that differ are
        returned and warned about); check mode reports them as changes either way.
    type: bool
    default: true
author: gpufleet
"""

EXAMPLES = r"""
- name: Performance governor on every CPU
  cpu_governor:
    governor: performance
"""

RETURN = r"""
present:
  description: Whether any CPU has a cpufreq governor.
  returned: always
  type: bool
cpus:
  description: How many CPUs have one.
  returned: always
  type: int
differing:
  description: CPU name to the governor it had, for the CPUs that differed.
  returned: always
  type: dict
"""

import glob
import os
import re

from ansible.module_utils.basic import AnsibleModule


def _cpu_key(path: str) -> int:
    m = re.search(r"/cpu(\d+)/", path)
    return int(m.group(1)) if m else -1


def main() -> None:
    module = AnsibleModule(argument_spec={"governor": {"type": "str", "required": True},
                                          "sysfs": {"type": "path", "default": "/sys/devices/system/cpu"},
                                          "apply": {"type": "bool", "default": True}},
                           supports_check_mode=True)
    want, sysfs = module.params["governor"], module.params["sysfs"]
    files = sorted(glob.glob(os.path.join(sysfs, "cpu[0-9]*", "cpufreq", "scaling_governor")), key=_cpu_key)
    differing: dict[str, str] = {}
    for f in files:
        try:
            with open(f, encoding="ascii") as fh:
                have = fh.read().strip()
        except OSError as e:
            module.fail_json(msg=f"cpu_governor: cannot read {f}: {e.strerror}")
        if have != want:
            differing[f"cpu{_cpu_key(f)}"] = have
    result = {"present": bool(files), "cpus": len(files), "differing": differing, "governor": want}
    if not differing or module.check_mode:
        module.exit_json(changed=bool(differing), **result)
    if not module.params["apply"]:
        module.warn(f"CPU governor differs on {', '.join(differing)} (expected {want}); not set (apply false)")
        module.exit_json(changed=False, **result)
    for cpu in differing:
        path = os.path.join(sysfs, cpu, "cpufreq", "scaling_governor")
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(want + "\n")
        except OSError as e:
            offered = "unknown"
            try:
                with open(os.path.join(sysfs, cpu, "cpufreq", "scaling_available_governors"), encoding="ascii") as a:
                    offered = a.read().strip()
            except OSError:
                pass
            module.fail_json(msg=f"cpu_governor: cannot set {path} to {want} ({e.strerror}); the driver offers: "
                             f"{offered}. Fix host_tuning_cpu_governor, or host_tuning_sysfs_cpu where /sys is "
                             "read-only.", **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
