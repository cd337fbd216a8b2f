#!/usr/bin/python
"""Ansible module: a set of kernel settings in one sysctl.d file and in the running kernel, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sysctl_settings
short_description: Own one sysctl.d file and keep the running kernel at its values, in one call
description:
  - Writes C(path) as one C(name=value) line per setting, in the order given, and nothing else (the file is the
    role's own); rewrites it atomically only when its content, mode or owner differ.
  - With C(apply), compares each setting's running value (C(/proc/sys), whitespace-separated fields compared one
    by one, as sysctl prints them) and sets the ones that differ with C(sysctl -w).
  - One module run for the whole set where M(ansible.posix.sysctl) takes one per setting.
  - Supports check mode and diff mode.
options:
  settings:
    description: Setting name (dotted, e.g. C(vm.max_map_count)) to value; an ordered mapping.
    type: dict
    required: true
  path:
    description: The sysctl.d file, absolute.
    type: path
    required: true
  apply:
    description: Also set the running kernel's values (false where /proc/sys is read-only, e.g. containers).
    type: bool
    default: true
author: gpufleet
"""

EXAMPLES = r"""
- name: Set the kernel settings
  sysctl_settings:
    settings: {vm.max_map_count: "1048576", kernel.numa_balancing: "0"}
    path: /etc/sysctl.d/90-gpufleet.conf
"""

RETURN = r"""
settings:
  description: One entry per setting; C(file) and C(running) say what differed (or would, in check mode).
  returned: always
  type: list
  elements: dict
  sample:
    - {name: vm.max_map_count, value: "1048576", changed: true, file: true, running: false, was: null}
file_changed:
  description: Whether the file differed.
  returned: always
  type: bool
"""

import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_files import inspect, write

#: sysctl(8)'s names: dotted (or slashed) words of letters, digits, ``_``, ``-``, ``@`` (interface names) and ``+``.
NAME = re.compile(r"^[A-Za-z0-9_@+-]+([./][A-Za-z0-9_@+-]+)+$")
PROC_SYS = "/proc/sys"


def render(settings: dict[str, str]) -> str:
    return "".join(f"{name}={value}\n" for name, value in settings.items())


def file_values(text: str) -> dict[str, str]:
    """``name=value`` lines as the kernel's sysctl tools read them (comments and blanks skipped, last one wins)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        name, _, value = line.partition("=")
        found[name.strip()] = value.strip()
    return found


def proc_path(name: str, root: str = PROC_SYS) -> str:
    # sysctl(8): dots separate levels; a slash in a dotted name stands for a dot inside one level (VLAN names).
    parts = name.split("/") if "/" in name and "." not in name else [p.replace("/", ".") for p in name.split(".")]
    return os.path.join(root, *parts)


def read_running(name: str, root: str = PROC_SYS) -> str | None:
    try:
        with open(proc_path(name, root), encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def same_value(running: str | None, want: str) -> bool:
    return running is not None and running.split() == want.split()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "settings": {"type": "dict", "required": True},
            "path": {"type": "path", "required": True},
            "apply": {"type": "bool", "default": True},
            # Tests point it at a scratch tree; never set by roles.
            "proc_root": {"type": "path", "default": PROC_SYS},
        },
        supports_check_mode=True,
    )
    path: str = module.params["path"]
    apply: bool = module.params["apply"]
    root: str = module.params["proc_root"]
    settings = {str(k): str(v) for k, v in module.params["settings"].items()}
    # Everything is validated before anything is touched.
    if not os.path.isabs(path):
        module.fail_json(msg=f"sysctl_settings: path {path!r} is not absolute. Fix: give the full path.")
    for name, value in settings.items():
        if not NAME.match(name):
            module.fail_json(msg=f"sysctl_settings: {name!r} is not a sysctl name. Fix: e.g. vm.max_map_count.")
        if not value.strip() or "\n" in value:
            module.fail_json(msg=f"sysctl_settings: {name}: value {value!r} must be one non-empty line.")

    content = render(settings)
    current, st = inspect(path)
    before = "" if current is None else current.decode(errors="replace")
    in_file = file_values(before)
    file_changed = current != content.encode() or (
        st is not None and ((st.st_mode & 0o7777) != 0o644 or st.st_uid != 0 or st.st_gid != 0))

    results: list[dict[str, Any]] = []
    to_set: list[tuple[str, str]] = []
    for name, value in settings.items():
        file_differs = in_file.get(name) != value
        running = read_running(name, root) if apply else None
        running_differs = apply and not same_value(running, value)
        if running_differs:
            to_set.append((name, value))
        results.append({"name": name, "value": value, "changed": file_differs or running_differs,
                        "file": file_differs, "running": running_differs, "was": running})

    diffs: list[dict[str, str]] = []
    if file_changed:
        diffs.append({"before_header": path, "after_header": path, "before": before, "after": content})
    if to_set:
        diffs.append({"before_header": f"{root} (running)", "after_header": f"{root} (running)",
                      "before": "".join(f"{r['name']}={r['was']}\n" for r in results if r["running"]),
                      "after": "".join(f"{n}={v}\n" for n, v in to_set)})
    if not module.check_mode:
        if file_changed:
            write(path, content.encode(), 0o644, 0, 0)
        for name, value in to_set:
            rc, out, err = module.run_command(["sysctl", "-w", f"{name}={value}"])
            if rc != 0:
                module.fail_json(msg=f"sysctl_settings: sysctl -w {name}={value} failed: {(err or out).strip()}",
                                 settings=results, file_changed=file_changed)
    module.exit_json(changed=file_changed or bool(to_set), settings=results, file_changed=file_changed, diff=diffs)


if __name__ == "__main__":
    main()
