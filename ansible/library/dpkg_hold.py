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
  - With O(recover), a dpkg run that was interrupted (packages left unpacked, half-configured or half-installed,
    or dpkg's journal not yet folded into its database, which apt reports as C(dpkg was interrupted)) is finished
    first with C(dpkg --configure -a), as apt runs dpkg, and the state is read again. The same read finds it, so a
    clean host pays nothing for it. In check mode the recovery is reported as a change and not run.
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
  recover:
    description:
      - Finish an interrupted dpkg run (C(dpkg --configure -a)) before anything else, when the read shows one.
        A named package left half-installed at its pinned version is reinstalled at it (apt would see nothing to
        install there); one half done at another version is returned in RV(moving), for the install that follows.
        What is still unfinished after that, or half done and not named, fails the task.
    type: bool
    default: false
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
interrupted:
  description:
    - Every package of the host (named or not) that an interrupted dpkg run left behind, as read before any
      recovery, name -> C(version), C(selection), C(status), C(reinst_required) (dpkg's C(R) flag) and C(abbrev)
      (C(dpkg -l)'s letters, C(iHR)). Empty on a clean host.
  returned: always
  type: dict
recovered:
  description: True when C(dpkg --configure -a) ran, or in check mode would run.
  returned: always
  type: bool
gpufleet_notice:
  description:
    - One line for the run's summary (gpufleet's runner prints it with the host), set when a recovery ran or would
      run. C(event) says what, C(detail) which packages in which state.
  returned: when recovered
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

NOT_INSTALLED = "not installed"
# Statuses a dpkg run leaves between unpacking and configuring (``dpkg --audit`` lists them; apt refuses to work).
INTERRUPTED = frozenset({"half-installed", "unpacked", "half-configured", "triggers-awaited"})
ABSENT = frozenset({"not-installed", "config-files"})
# How apt runs dpkg (ansible.builtin.apt does the same): no questions, keep locally changed configuration files.
DPKG_ENV = {"DEBIAN_FRONTEND": "noninteractive", "DEBIAN_PRIORITY": "critical", "LC_ALL": "C"}
CONFIGURE_ALL = ["dpkg", "--force-confdef", "--force-confold", "--configure", "-a"]


class State:
    """One read of dpkg's database: every package's selection, version, status and reinst-required flag."""

    def __init__(self, module: AnsibleModule) -> None:
        # Every package, not only the named ones: an interrupted run may have stopped in a dependency. dpkg-query
        # loads the whole database either way; only the printing grows.
        rc, out, err = module.run_command(
            ["dpkg-query", "-W", "-f=${Package}\t${db:Status-Want}\t${db:Status-Status}\t${db:Status-Eflag}"
                                 "\t${Version}\t${db:Status-Abbrev}\n"])
        if rc != 0:
            module.fail_json(msg=f"dpkg-query failed (rc {rc}): {err.strip()}")
        # name -> (want, status, eflag, version, abbrev: dpkg -l's letters, iHR)
        self.rows: dict[str, tuple[str, str, str, str, str]] = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 6:
                self.rows[parts[0]] = (parts[1], parts[2], parts[3], parts[4], parts[5].strip())
        # dpkg writes each status change to its journal first; apt refuses to run until one is folded in.
        updates = os.path.join(os.environ.get("DPKG_ADMINDIR", "/var/lib/dpkg"), "updates")
        try:
            self.journal = any(n.isdigit() for n in os.listdir(updates))
        except OSError:
            self.journal = False

    def selection(self, name: str) -> str:
        row = self.rows.get(name)
        return row[0] if row and row[1] not in ABSENT else NOT_INSTALLED

    def version(self, name: str) -> str | None:
        row = self.rows.get(name)
        return row[3] if row and row[1] not in ABSENT else None

    def status(self, name: str) -> str:
        row = self.rows.get(name)
        return row[1] if row else "not-installed"

    def reinstall_required(self, name: str) -> bool:
        row = self.rows.get(name)
        return row is not None and (row[1] == "half-installed" or row[2] == "reinstreq")

    def settled(self, name: str, version: str) -> bool:
        """Installed at ``version`` and configured (its triggers may still be pending: dpkg runs them on its own):
        nothing for apt to do."""
        return (self.version(name) == version and self.status(name) in ("installed", "triggers-pending")
                and self.rows[name][2] == "ok")

    @property
    def interrupted(self) -> dict[str, dict[str, object]]:
        return {n: {"version": r[3] or None, "selection": r[0], "status": r[1], "reinst_required": r[2] == "reinstreq",
                    "abbrev": r[4]}
                for n, r in self.rows.items() if r[1] in INTERRUPTED or r[2] == "reinstreq"}

    @property
    def pending(self) -> bool:
        return self.journal or bool(self.interrupted)


def describe(interrupted: dict[str, dict[str, object]]) -> str:
    """``nvidia-utils-570 570.133.20-0ubuntu1 (iHR)``, comma-separated: what ``dpkg -l`` shows of each."""
    return ", ".join(f"{n} {v['version'] or ''} ({v['abbrev']})".replace("  ", " ")
                     for n, v in sorted(interrupted.items())) or "dpkg's journal only"


def recover(module: AnsibleModule, names: list[str], pinned: dict[str, str] | None, found: State) -> State:
    """``dpkg --configure -a``, then a fresh read. A named package still half-installed at its pinned version is
    reinstalled at it here: apt sees nothing to install there and would configure what depends on it first, which
    fails (the install that follows moves those at another version). What is still unfinished then, and what no
    install of ours will reinstall (not among ``names``), fails the task: apt would refuse every later install."""
    rc, out, err = module.run_command(CONFIGURE_ALL, environ_update=DPKG_ENV)
    after = State(module)
    again = [n for n in names if pinned is not None and after.reinstall_required(n) and after.version(n) == pinned[n]]
    if again:
        rc, out, err = module.run_command(
            ["apt-get", "install", "-y", "-q", "--reinstall", "--allow-change-held-packages", "--no-install-recommends",
             "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
             "-o", "DPkg::Lock::Timeout=60", *(f"{n}={pinned[n]}" for n in again if pinned is not None)],
            environ_update=DPKG_ENV)
        after = State(module)
    stranded = {n: st for n, st in after.interrupted.items() if n not in names or n in again}
    if stranded or after.journal:
        module.fail_json(
            msg=f"dpkg_hold: `{' '.join(CONFIGURE_ALL)}`{' and a reinstall of ' + ', '.join(again) if again else ''} "
                f"(rc {rc}) left {describe(stranded)} unfinished, which the install of this task's packages "
                f"({', '.join(names)}) does not cover. Fix: run `dpkg --configure -a` on the host, fix what "
                f"`dpkg --audit` reports, then rerun. Its output: {(out + err).strip()[-1500:]}",
            interrupted=found.interrupted, recovered=False)
    return after


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "selection": {"type": "str", "choices": ["hold", "install"], "default": "hold"},
            "versions": {"type": "dict"},
            "read_only": {"type": "bool", "default": False},
            "recover": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    names: list[str] = list(dict.fromkeys(module.params["names"]))
    selection: str = module.params["selection"]
    pinned: dict[str, str] | None = module.params["versions"]
    if pinned is not None and (unpinned := [n for n in names if n not in pinned]):
        module.fail_json(msg=f"dpkg_hold: versions has no entry for {', '.join(unpinned)}. Fix: give every name "
                             "its pinned version, or leave versions out.")
    state = State(module)
    interrupted = state.interrupted
    recovering = bool(module.params["recover"]) and state.pending
    if recovering and not module.check_mode:
        state = recover(module, names, pinned, state)
    selections = {n: state.selection(n) for n in names}
    installed = {n: state.version(n) for n in names}
    statuses = {n: state.status(n) for n in names}
    # Unpacked or half-installed at the pinned version still moves: apt must configure or reinstall it.
    moving = [n for n in names if pinned is not None and not state.settled(n, str(pinned[n]))]
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
    result: dict[str, object] = {
        "changed": bool(changing) or recovering,
        "changed_packages": changing,
        "before": selections,
        "moving": moving,
        "installed": installed,
        "status": statuses,
        "interrupted": interrupted,
        "recovered": recovering,
        "diff": {
            "before": "".join(f"{n} {before[n]}\n" for n in changing),
            "after": "".join(f"{n} {after[n]}\n" for n in changing),
            "before_header": "dpkg selections",
            "after_header": "dpkg selections",
        },
    }
    if recovering:
        result["gpufleet_notice"] = {
            "event": "would recover interrupted dpkg" if module.check_mode else "recovered interrupted dpkg",
            "detail": describe(interrupted)}
    if changing and not module.check_mode:
        data = "".join(f"{n} {selection}\n" for n in changing)
        rc, _, err = module.run_command(["dpkg", "--set-selections"], data=data)
        if rc != 0:
            module.fail_json(msg=f"dpkg --set-selections failed (rc {rc}): {err.strip()}", **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
