#!/usr/bin/python
"""Ansible module: plan, and where told, create node-local NVMe scratch (md RAID 0 + XFS) from lsblk's view."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: local_scratch
short_description: Plan and create node-local NVMe scratch (md RAID 0 over the drives, XFS)
description:
  - Reads C(lsblk --json) (or a captured copy, O(lsblk_json_file)) and plans with gpufleet's rules
    (module_utils gpufleet_local_scratch, the same code the package tests).
  - Refuses, changing nothing, a drive that holds a file system, a partition table or a RAID member signature,
    or is mounted, naming each drive and what it holds; O(force) wipes the drives that are not in use.
  - With O(apply) (and not in check mode) runs the plan (wipefs, mdadm --create, mkfs.xfs) and reads lsblk again
    for the UUIDs. Without O(apply) it only plans (changed false; O(commands) says what would run).
  - Returns the mdadm.conf ARRAY line and the fstab source (C(UUID=...)) once the file system exists.
options:
  devices:
    description: Whole-disk paths to use; empty takes every NVMe disk that holds nothing.
    type: list
    elements: str
    default: []
  raid0:
    description: Stripe two or more drives into one md RAID 0; false allows exactly one drive.
    type: bool
    default: true
  force:
    description: Wipe listed drives that hold a file system, partition table or RAID signature (never a busy one).
    type: bool
    default: false
  md_name:
    description: Name of the md array (C(/dev/md/<md_name>)).
    type: str
    default: scratch
  label:
    description: XFS label that marks the scratch file system as this module's (at most 12 characters).
    type: str
    default: scratch
  variable:
    description: The variable named in refusals (the role's devices variable).
    type: str
    default: local_scratch_devices
  apply:
    description: Run the plan; false plans only (where drives cannot be touched, e.g. containers).
    type: bool
    default: true
  lsblk_json_file:
    description: Read this captured C(lsblk --json) output instead of running lsblk (tests).
    type: path
author: gpufleet
"""

EXAMPLES = r"""
- name: Plan the scratch array over two drives
  local_scratch:
    devices: [/dev/nvme2n1, /dev/nvme3n1]
    apply: false
  register: scratch
"""

RETURN = r"""
present:
  description: Whether the scratch file system exists (after the run).
  returned: always
  type: bool
devices:
  description: The drives used.
  returned: always
  type: list
  elements: str
skipped:
  description: NVMe drives left alone because they hold something (devices empty), path to what it holds.
  returned: always
  type: dict
commands:
  description: The commands run (apply) or that would run (check mode, or apply false).
  returned: always
  type: list
  elements: list
target:
  description: The device carrying the file system (/dev/md/<md_name>, or the one drive).
  returned: always
  type: str
array_line:
  description: mdadm.conf's ARRAY line for the array, null without md or before it exists.
  returned: always
  type: str
fstab_src:
  description: The fstab source (UUID=...) of the file system, null before it exists.
  returned: always
  type: str
"""

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_local_scratch import LSBLK_COLUMNS, LsblkError, parse_lsblk, plan


def read_lsblk(module: AnsibleModule) -> list[dict[str, Any]]:
    path = module.params["lsblk_json_file"]
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            module.fail_json(msg=f"local_scratch: lsblk_json_file={path}: {e.strerror}")
    else:
        rc, text, err = module.run_command(["lsblk", "--json", "--bytes", "-o", LSBLK_COLUMNS],
                                           environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"lsblk failed (rc {rc}): {(text + err).strip()[:500]}")
    try:
        return parse_lsblk(text)
    except LsblkError as e:
        module.fail_json(msg=f"local_scratch: lsblk output unreadable ({path or 'lsblk --json'}): {e}")
    raise AssertionError("unreachable")


def main() -> None:
    module = AnsibleModule(argument_spec={
        "devices": {"type": "list", "elements": "str", "default": []},
        "raid0": {"type": "bool", "default": True},
        "force": {"type": "bool", "default": False},
        "md_name": {"type": "str", "default": "scratch"},
        "label": {"type": "str", "default": "scratch"},
        "variable": {"type": "str", "default": "local_scratch_devices"},
        "apply": {"type": "bool", "default": True},
        "lsblk_json_file": {"type": "path"},
    }, supports_check_mode=True)
    p = module.params
    opts = {"force": p["force"], "raid0": p["raid0"], "md_name": p["md_name"], "label": p["label"],
            "variable": p["variable"]}
    result = plan(read_lsblk(module), p["devices"], **opts)
    if result["error"]:
        module.fail_json(msg=result["error"], **{k: v for k, v in result.items() if k != "error"})
    commands = result["commands"]
    if not commands or not p["apply"]:
        # apply false: a plan only, nothing here can change (changed false, so a converge stays idempotent).
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)
    for argv in commands:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"local_scratch: {' '.join(argv)} failed (rc {rc}): {(out + err).strip()[:800]}",
                             ran=commands[:commands.index(argv)], **result)
    module.run_command(["udevadm", "settle"])
    after = plan(read_lsblk(module), result["devices"], **opts)
    module.exit_json(changed=True, ran=commands, **{**after, "commands": commands})


if __name__ == "__main__":
    main()
