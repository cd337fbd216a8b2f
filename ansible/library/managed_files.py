#!/usr/bin/python
"""Ansible module: write a set of small configuration files in one call, only those that differ."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: managed_files
short_description: Write several small text files in one call, changing only what differs
description:
  - Compares each file's content, mode, owner and group with the request and rewrites (atomically) or fixes only
    what differs; missing parent directories are created (root, 0755).
  - One call instead of one M(ansible.builtin.template) per file (each of which costs two module runs on the host)
    keeps a converged rerun fast. Render templates on the controller with C(lookup('ansible.builtin.template', ...)).
  - Supports check mode and diff mode (one before/after per file).
options:
  files:
    description: The files.
    type: list
    elements: dict
    required: true
    suboptions:
      dest:
        description: Absolute path.
        type: path
        required: true
      content:
        description: The whole text of the file.
        type: str
        required: true
      mode:
        description: Octal mode, e.g. C("0644").
        type: str
        default: "0644"
      owner:
        description: Owner name.
        type: str
        default: root
      group:
        description: Group name.
        type: str
        default: root
author: gpufleet
"""

EXAMPLES = r"""
- name: Pin and configure NCCL
  managed_files:
    files:
      - dest: /etc/apt/preferences.d/gpufleet-nccl.pref
        content: "{{ lookup('ansible.builtin.template', 'preferences.j2') }}"
      - dest: /etc/nccl.conf
        content: "{{ lookup('ansible.builtin.template', 'nccl.conf.j2') }}"
"""

RETURN = r"""
files:
  description: One entry per file, with what happened to it.
  returned: always
  type: list
  elements: dict
  sample:
    - dest: /etc/nccl.conf
      state: updated
      changed: true
changed_files:
  description: Paths of the files that changed (or would change in check mode).
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_files import inspect, write


def desired_ids(module: AnsibleModule, spec: dict[str, Any]) -> tuple[int, int, int]:
    try:
        mode = int(str(spec["mode"]), 8)
    except ValueError:
        module.fail_json(msg=f"managed_files: {spec['dest']}: mode {spec['mode']!r} is not octal. Fix: e.g. \"0644\".")
    try:
        uid = pwd.getpwnam(spec["owner"]).pw_uid
        gid = grp.getgrnam(spec["group"]).gr_gid
    except KeyError as exc:
        module.fail_json(msg=f"managed_files: {spec['dest']}: unknown owner or group ({exc}). Fix: create it first.")
    return mode, uid, gid


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list", "elements": "dict", "required": True,
                "options": {
                    "dest": {"type": "path", "required": True},
                    "content": {"type": "str", "required": True},
                    "mode": {"type": "str", "default": "0644"},
                    "owner": {"type": "str", "default": "root"},
                    "group": {"type": "str", "default": "root"},
                },
            },
        },
        supports_check_mode=True,
    )
    specs: list[dict[str, Any]] = module.params["files"]
    # Everything is validated before the first write, so bad input changes nothing.
    plans = []
    for spec in specs:
        if not os.path.isabs(spec["dest"]):
            module.fail_json(msg=f"managed_files: dest {spec['dest']!r} is not absolute. Fix: give the full path.")
        plans.append((spec, *desired_ids(module, spec)))

    results, diffs, changed_files = [], [], []
    for spec, mode, uid, gid in plans:
        dest, data = spec["dest"], spec["content"].encode()
        current, st = inspect(dest)
        if current is None:
            state = "created"
        elif current != data:
            state = "updated"
        elif st is not None and ((st.st_mode & 0o7777) != mode or st.st_uid != uid or st.st_gid != gid):
            state = "attributes"
        else:
            state = "unchanged"
        changed = state != "unchanged"
        entry: dict[str, Any] = {"dest": dest, "state": state, "changed": changed}
        if changed:
            changed_files.append(dest)
            before = "" if current is None else current.decode(errors="replace")
            diffs.append({"before_header": dest, "after_header": dest, "before": before, "after": spec["content"]})
            if state == "attributes" and st is not None:
                entry["before"] = {"mode": f"{st.st_mode & 0o7777:04o}", "uid": st.st_uid, "gid": st.st_gid}
                entry["after"] = {"mode": f"{mode:04o}", "uid": uid, "gid": gid}
            if not module.check_mode:
                if state == "attributes":
                    os.chown(dest, uid, gid)
                    os.chmod(dest, mode)
                else:
                    write(dest, data, mode, uid, gid)
        results.append(entry)
    module.exit_json(changed=bool(changed_files), files=results, changed_files=changed_files, diff=diffs)


if __name__ == "__main__":
    main()
