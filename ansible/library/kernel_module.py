#!/usr/bin/python
"""Ansible module: read whether a kernel module is loaded, and load it (one run; drift names an unloaded one)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_module
short_description: Read whether a kernel module is loaded, and load it with modprobe
description:
  - Reads the kernel's list of loaded modules (O(modules_file), C(/proc/modules)) and loads O(name) with
    C(modprobe) when it is missing. Check mode reports a missing module as a change (gpufleet drift names it).
  - With O(load=false) (hosts that cannot load modules, e.g. containers) it only reads; a missing module is warned
    about, not loaded (the modules-load.d file loads it at boot).
  - A modules file that does not exist (a stand-in list nobody wrote) returns O(present=false) and changes nothing.
options:
  name:
    description: Module name as the kernel lists it (underscores, e.g. nvidia_peermem).
    type: str
    required: true
  load:
    description: Load the module when it is missing.
    type: bool
    default: true
  modules_file:
    description: The loaded-modules list (a stand-in list where the kernel's is not the host's own).
    type: path
    default: /proc/modules
author: gpufleet
"""

EXAMPLES = r"""
- name: GPUDirect RDMA module loaded
  kernel_module:
    name: nvidia_peermem
"""

RETURN = r"""
present:
  description: Whether the modules list could be read.
  returned: always
  type: bool
loaded:
  description: Whether the module was loaded before this run.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def is_loaded(path: str, name: str) -> bool | None:
    """None when the list cannot be read."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return any(line.split(" ", 1)[0] == name for line in f)
    except FileNotFoundError:
        return None


def main() -> None:
    module = AnsibleModule(argument_spec={"name": {"type": "str", "required": True},
                                          "load": {"type": "bool", "default": True},
                                          "modules_file": {"type": "path", "default": "/proc/modules"}},
                           supports_check_mode=True)
    name = module.params["name"].replace("-", "_")
    loaded = is_loaded(module.params["modules_file"], name)
    result = {"name": name, "state": "present", "present": loaded is not None, "loaded": bool(loaded)}
    if loaded is None:
        module.exit_json(changed=False, msg=f"{module.params['modules_file']} not found: not checked", **result)
    if loaded:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)
    if not module.params["load"]:
        module.warn(f"kernel module {name} is not loaded and load is false: it loads at the next boot")
        module.exit_json(changed=False, **result)
    rc, out, err = module.run_command(["modprobe", name])
    if rc != 0:
        module.fail_json(msg=f"modprobe {name} failed (rc {rc}): {(out + err).strip()[:500]}", **result)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
