#!/usr/bin/python
"""Ansible module: compare the node slurm.conf declares with the hardware ``slurmd -C`` finds on it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: slurm_node_hardware
short_description: Compare a compute node's slurm.conf declaration with what slurmd -C finds
description:
  - Runs C(slurmd -C) (the hardware as slurmd registers it) and compares CPUs, Sockets, CoresPerSocket,
    ThreadsPerCore and RealMemory with the NodeName fields slurm.conf declares for the node, with gpufleet's Slurm
    node grammar (module_utils gpufleet_slurm_node).
  - Fails where slurmctld would set the node INVALID_REG and drain it (fewer CPUs, a smaller
    Sockets x CoresPerSocket x ThreadsPerCore or less RealMemory than declared), unless O(config_overrides); every
    other difference, and with O(config_overrides) every difference, is returned as C(gpufleet_notice) for the
    run's summary.
  - Changes nothing; runs in check mode. Without slurmd (check mode before the packages are installed) it returns
    O(present=false) and says so.
options:
  declared:
    description: The NodeName fields slurm.conf declares for the node, e.g. C(CPUs=192 Sockets=2 RealMemory=1024).
    type: str
    required: true
  config_overrides:
    description: slurm.conf has SlurmdParameters=config_overrides (slurmd registers the declaration as it is).
    type: bool
    default: false
  node:
    description: The node's name in messages (the inventory name).
    type: str
    required: true
  slurmd:
    description: Path or name of slurmd.
    type: str
    default: slurmd
author: gpufleet
"""

EXAMPLES = r"""
- name: Compare the declaration with the hardware
  slurm_node_hardware:
    declared: CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1024
    node: "{{ inventory_hostname }}"
"""

RETURN = r"""
present:
  description: Whether slurmd was found and read.
  returned: always
  type: bool
found:
  description: The hardware (CPUs, Sockets, CoresPerSocket, ThreadsPerCore, RealMemory) as slurmd -C reports it.
  returned: when present
  type: dict
declared:
  description: The same fields as slurm.conf declares them (slurm.conf's defaults for those it leaves out).
  returned: when present
  type: dict
differences:
  description: Each differing field, its declared and found values, whether slurmctld refuses the node for it.
  returned: when present
  type: list
  elements: dict
text:
  description: slurmd -C's output.
  returned: when present
  type: str
gpufleet_notice:
  description:
    - One line for the run's summary (gpufleet's runner prints it with the host) when the declaration differs from
      the hardware and the node still registers. C(event) says what, C(detail) each field.
  returned: when the declaration differs and the module does not fail
  type: dict
"""

from dataclasses import asdict

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_slurm_node import (
    SlurmNodeError,
    declared_layout,
    parse_fields,
    parse_slurmd_c,
    verdict,
)


def main() -> None:
    module = AnsibleModule(argument_spec={"declared": {"type": "str", "required": True},
                                          "config_overrides": {"type": "bool", "default": False},
                                          "node": {"type": "str", "required": True},
                                          "slurmd": {"type": "str", "default": "slurmd"}},
                           supports_check_mode=True)
    p = module.params
    try:
        declared = declared_layout(parse_fields(p["declared"]))
    except SlurmNodeError as e:
        module.fail_json(msg=f"slurm: {p['node']}: {e}. Fix slurm_node_cpus, slurm_node_layout or "
                             "slurm_node_real_memory_mb in the inventory's group_vars.")
    path = module.get_bin_path(p["slurmd"])
    if path is None:
        module.exit_json(changed=False, present=False,
                         msg=f"{p['slurmd']} not found: nothing to compare until the Slurm packages are installed")
    rc, out, err = module.run_command([path, "-C"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{p['slurmd']} -C failed (rc {rc}): {(out + err).strip()[:500]}", rc=rc)
    try:
        _, found = parse_slurmd_c(out)
    except SlurmNodeError as e:
        module.fail_json(msg=f"{p['slurmd']} -C output unreadable: {e}", text=out)
    v = verdict(p["node"], declared, found, p["config_overrides"])
    result = {"changed": False, "present": True, "found": found.to_dict(), "declared": declared.to_dict(),
              "differences": [asdict(d) for d in v.differences], "text": out}
    if v.failure:
        module.fail_json(msg=v.failure, **result)
    if v.notice:
        result["gpufleet_notice"] = v.notice
    module.exit_json(**result)


if __name__ == "__main__":
    main()
