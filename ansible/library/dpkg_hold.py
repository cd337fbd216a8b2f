#!/usr/bin/python
"""Ansible module: set the dpkg selection (hold or install) of many packages in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: dpkg_hold
short_description: Hold (or release) a set of Debian packages in one call
description:
  - Reads the selections of all named packages with one C(dpkg-query) and changes only those that differ, with one
    C(dpkg --set-selections).
  - One call instead of a loop of M(ansible.builtin.dpkg_selections) keeps a converged rerun fast (every module call
    costs a Python start on the host).
  - Holding a package that is not installed fails (dpkg would ignore it silently and the hold would be missing);
    in check mode such a package is reported as one that would be held.
  - Supports check mode and diff mode.
options:
  names:
    description: Package names.
    type: list
    elements: str
    required: true
  selection:
    description: The selection to set.
    type: str
    choices: [hold, install]
    default: hold
  read_only:
    description:
      - Only read and return the state (RV(installed), RV(moving), RV(before)); change no selection. For package sets
        that are pinned but not held.
    type: bool
    default: false
  versions:
    description:
      - The pinned version of each name. When given, only the names installed at exactly that version get the
        selection; the others are returned in RV(moving) and left as they are, for the install that follows (and a
        second call after it). Lets a converged host skip the install with one read.
    type: dict
author: gpufleet
"""

EXAMPLES = r"""
- name: Hold the driver packages
  dpkg_hold:
    names: [nvidia-driver-570-open, nvidia-utils-570]

- name: Release the hold before an upgrade
  dpkg_hold:
    names: [nvidia-utils-570]
    selection: install
"""

RETURN = r"""
changed_packages:
  description: The packages whose selection was (or in check mode would be) changed.
  returned: always
  type: list
  elements: str
before:
  description: Selection of every named package before the call (C(not installed) when dpkg does not know it).
  returned: always
  type: dict
moving:
  description: With O(versions), the names not installed at their pinned version (not touched).
  returned: always
  type: list
  elements: str
installed:
  description: Installed version of every named package (null when not installed).
  returned: always
  type: dict
status:
  description:
    - dpkg's status of every named package (installed, unpacked, half-installed, half-configured, ...;
      not-installed when dpkg does not know it). C(gpufleet drift) reports an interrupted dpkg run from it.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

NOT_INSTALLED = "not installed"


def read_state(module: AnsibleModule, names: list[str]) -> tuple[dict[str, str], dict[str, str | None],
                                                                 dict[str, str]]:
    """(selection, installed version, dpkg status) of every name; unknown or removed packages are not installed."""
    # rc 1 only means that some names are unknown to dpkg.
    rc, out, err = module.run_command(
        ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Want}\t${db:Status-Status}\t${Version}\n", *names])
    if rc not in (0, 1):
        module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip()}")
    found: dict[str, tuple[str, str]] = {}
    statuses: dict[str, str] = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 4:
            statuses[parts[0]] = parts[2]
        if len(parts) == 4 and parts[2] not in ("not-installed", "config-files"):
            found[parts[0]] = (parts[1], parts[3])
    selections = {n: found[n][0] if n in found else NOT_INSTALLED for n in names}
    versions = {n: found[n][1] if n in found else None for n in names}
    return selections, versions, {n: statuses.get(n, "not-installed") for n in names}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "selection": {"type": "str", "choices": ["hold", "install"], "default": "hold"},
            "versions": {"type": "dict"},
            "read_only": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    names: list[str] = list(dict.fromkeys(module.params["names"]))
    selection: str = module.params["selection"]
    pinned: dict[str, str] | None = module.params["versions"]
    if pinned is not None and (unpinned := [n for n in names if n not in pinned]):
        module.fail_json(msg=f"dpkg_hold: versions has no entry for {', '.join(unpinned)}. Fix: give every name "
                             "its pinned version, or leave versions out.")
    selections, installed, statuses = read_state(module, names)
    moving = [n for n in names if pinned is not None and installed[n] != str(pinned[n])]
    before = {n: s for n, s in selections.items() if n not in moving}
    missing = [n for n, s in before.items() if s == NOT_INSTALLED]
    if missing and selection == "hold" and not module.check_mode and not module.params["read_only"]:
        module.fail_json(
            msg=f"dpkg_hold: cannot hold {', '.join(missing)}: not installed (dpkg ignores selections of unknown "
                "packages). Fix: install them first, or remove them from the list of packages to hold.",
            before=selections)
    changing = [n for n, s in before.items() if s != selection and not (s == NOT_INSTALLED and selection != "hold")
                and not module.params["read_only"]]
    after = {n: (selection if n in changing else s) for n, s in before.items()}
    result = {
        "changed": bool(changing),
        "changed_packages": changing,
        "before": selections,
        "moving": moving,
        "installed": installed,
        "status": statuses,
        "diff": {
            "before": "".join(f"{n} {before[n]}\n" for n in changing),
            "after": "".join(f"{n} {after[n]}\n" for n in changing),
            "before_header": "dpkg selections",
            "after_header": "dpkg selections",
        },
    }
    if changing and not module.check_mode:
        data = "".join(f"{n} {selection}\n" for n in changing)
        rc, _, err = module.run_command(["dpkg", "--set-selections"], data=data)
        if rc != 0:
            module.fail_json(msg=f"dpkg --set-selections failed (rc {rc}): {err.strip()}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
