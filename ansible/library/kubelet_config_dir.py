#!/usr/bin/python
"""Ansible module: make the kubelet run with --config-dir, so KubeletConfiguration drop-ins there are read."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kubelet_config_dir
short_description: Make the kubelet read a KubeletConfiguration drop-in directory (--config-dir)
description:
  - The kubelet reads the files of a drop-in directory only when it runs with C(--config-dir) (KEP-3983, beta
    on by default, from v1.31), and kubeadm's unit does not pass it.
  - Reads the kubelet unit as systemd assembles it (C(systemctl cat), drop-ins included, and the
    C(EnvironmentFile=) files it names) and expands the last C(ExecStart=) with its variables.
  - When the flag is there already, nothing is written (and a drop-in of ours is removed).
  - When the unit is kubeadm's layout (C(ExecStart=) uses C($KUBELET_CONFIG_ARGS), set by C(Environment=) in
    C(10-kubeadm.conf)), writes a systemd drop-in that sets C(KUBELET_CONFIG_ARGS) to its value plus
    C(--config-dir). Why that variable and not C(KUBELET_EXTRA_ARGS)? The latter comes from
    C(EnvironmentFile=/etc/default/kubelet) (C(/etc/sysconfig/kubelet)), which the packages ship with an empty
    C(KUBELET_EXTRA_ARGS=) and which overrides any C(Environment=) (systemd.exec); that file is the admin's,
    and C(/var/lib/kubelet/kubeadm-flags.env) is rewritten by kubeadm init, join and upgrade.
  - Any other layout without the flag fails with what to add, instead of leaving the drop-in unread.
  - No kubelet unit (or no systemd): nothing to do, nothing changed.
  - The caller reloads systemd when it changed; the kubelet is not restarted (registerWithTaints matters at
    registration, and kubeadm's kubelet restarts itself until it joins).
  - Supports check mode and diff mode.
options:
  config_dir:
    description: The drop-in directory, absolute.
    type: path
    required: true
  state:
    description: C(present) ensures the flag; C(absent) removes the drop-in of ours only.
    type: str
    choices: [present, absent]
    default: present
  dropin:
    description: The systemd drop-in of ours for the kubelet unit.
    type: path
    default: /etc/systemd/system/kubelet.service.d/90-gpufleet-config-dir.conf
  unit:
    description: The kubelet's systemd unit.
    type: str
    default: kubelet.service
author: gpufleet
"""

EXAMPLES = r"""
- name: Make the kubelet read the drop-in directory
  kubelet_config_dir:
    config_dir: /etc/kubernetes/kubelet.conf.d
"""

RETURN = r"""
kubelet:
  description: C(absent) (no unit), C(flag) (the unit passes --config-dir itself), C(dropin) (ours passes it),
    C(unmanaged) (state absent, no flag).
  returned: always
  type: str
config_dir:
  description: The --config-dir the kubelet runs with (null when absent or not set).
  returned: always
  type: str
"""

import os
import re
import shlex

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_files import inspect, write

VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
KUBEADM_VAR = "KUBELET_CONFIG_ARGS"


def sections(text: str) -> list[tuple[str, list[str]]]:
    """``systemctl cat`` output split into (file, lines): each file starts with a ``# /path`` line."""
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("# /"):
            found.append((line[2:].strip(), []))
        elif found:
            found[-1][1].append(line)
    return found


def directives(lines: list[str]) -> list[tuple[str, str]]:
    """``Key=value`` of the [Service] section, continuation lines joined, comments skipped."""
    out: list[tuple[str, str]] = []
    section, pending = "", ""
    for raw in lines:
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def env_assignments(value: str) -> dict[str, str]:
    """``Environment=`` words (quoted as systemd quotes them) as a mapping."""
    return dict(w.split("=", 1) for w in shlex.split(value) if "=" in w)


def env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines of an ``EnvironmentFile=`` (quotes removed, comments skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        words = shlex.split(value) if value.strip() else [""]
        out[key.strip()] = " ".join(words)
    return out


def read_unit(text: str, skip: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The last ExecStart (as words), the Environment= variables and the EnvironmentFile= variables of the
    unit, leaving out the file ``skip`` (our own drop-in: what the unit does without us)."""
    exec_start: list[str] = []
    env: dict[str, str] = {}
    files: list[str] = []
    for path, lines in sections(text):
        if path == skip:
            continue
        for key, value in directives(lines):
            if key == "ExecStart":
                exec_start = shlex.split(value) if value else []  # an empty one resets the list
            elif key == "Environment":
                env.update(env_assignments(value))
            elif key == "EnvironmentFile":
                files.append(value)
    from_files: dict[str, str] = {}
    for name in files:
        optional = name.startswith("-")
        data, _ = inspect(name.lstrip("-"))
        if data is None and not optional:
            continue  # systemd would refuse to start it; the flag check below still says what is missing
        if data is not None:
            from_files.update(env_file(data.decode(errors="replace")))
    return exec_start, env, from_files


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """systemd's ExecStart expansion: a word that is ``$VAR`` alone splits at whitespace, ``${VAR}`` does not."""
    out: list[str] = []
    for word in words:
        bare = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if bare:
            out.extend(env.get(bare.group(1), "").split())
        else:
            out.append(VAR.sub(lambda m: env.get(m.group(1) or m.group(2), ""), word))
    return out


def config_dir_flag(argv: list[str]) -> str | None:
    for i, word in enumerate(argv):
        if word.startswith("--config-dir="):
            return word.split("=", 1)[1]
        if word == "--config-dir" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def render(value: str) -> str:
    # %% is a literal % in unit files (systemd.unit specifiers).
    return ("# Managed by gpufleet (role host_tuning): kubeadm's KUBELET_CONFIG_ARGS plus --config-dir, so the\n"
            "# kubelet reads the KubeletConfiguration drop-ins (registerWithTaints).\n"
            f"[Service]\nEnvironment=\"{KUBEADM_VAR}={value.replace('%', '%%')}\"\n")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config_dir": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "dropin": {"type": "path", "default": "/etc/systemd/system/kubelet.service.d/90-gpufleet-config-dir.conf"},
            "unit": {"type": "str", "default": "kubelet.service"},
        },
        supports_check_mode=True,
    )
    config_dir: str = module.params["config_dir"]
    dropin: str = module.params["dropin"]
    unit: str = module.params["unit"]
    if not config_dir.startswith("/"):
        module.fail_json(msg=f"kubelet_config_dir: config_dir {config_dir!r} is not absolute. Fix: give the full path.")
    current, _ = inspect(dropin)
    before = "" if current is None else current.decode(errors="replace")

    def finish(kubelet: str, want: str | None, flag: str | None) -> None:
        # want: the drop-in's content, or None for no drop-in of ours.
        changed = (want is None and current is not None) or (want is not None and before != want)
        if changed and not module.check_mode:
            if want is None:
                os.unlink(dropin)
            else:
                write(dropin, want.encode(), 0o644, 0, 0)
        diff = {"before_header": dropin, "after_header": dropin, "before": before, "after": want or ""}
        module.exit_json(changed=changed, kubelet=kubelet, config_dir=flag, diff=diff if changed else {})

    systemctl = module.get_bin_path("systemctl")
    rc, out, _ = module.run_command([systemctl, "cat", unit]) if systemctl else (1, "", "")
    if rc != 0 or not out.strip():
        finish("absent", None, None)
        return
    try:
        exec_start, env, from_files = read_unit(out, dropin)
    except ValueError as e:  # unbalanced quotes: systemd would refuse the line too
        module.fail_json(msg=f"host_tuning: the kubelet unit ({unit}) or an EnvironmentFile of it could not be "
                             f"read ({e}). Fix: the quoting of its Environment=/ExecStart= lines "
                             f"(systemctl cat {unit}).")
        return
    argv = expand(exec_start, {**env, **from_files})  # EnvironmentFile= overrides Environment= (systemd.exec)
    flag = config_dir_flag(argv)
    if module.params["state"] == "absent" or flag is not None:
        if flag is not None and flag != config_dir and module.params["state"] == "present":
            module.fail_json(msg=(
                f"host_tuning: the kubelet ({unit}) runs with --config-dir={flag}, but the registerWithTaints "
                f"drop-in goes to {config_dir}. Fix: set host_tuning_kubelet_config_dir: {flag} for this pool, "
                "or change the kubelet's --config-dir."))
        finish("flag" if flag is not None else "unmanaged", None, flag)
        return
    uses_var = any(f"${KUBEADM_VAR}" in w or f"${{{KUBEADM_VAR}}}" in w for w in exec_start)
    value = env.get(KUBEADM_VAR)
    if not uses_var or value is None or KUBEADM_VAR in from_files or any(c in value for c in '"\\\n'):
        module.fail_json(msg=(
            f"host_tuning: the kubelet ({unit}) runs without --config-dir, so the registerWithTaints drop-in in "
            f"{config_dir} would be ignored and the node would register without its taints; its unit is not "
            f"kubeadm's layout (ExecStart with ${KUBEADM_VAR} set by Environment=), which this role extends. "
            f"Fix: add --config-dir={config_dir} to the kubelet's arguments (kubelet v1.31 or later), or set "
            "host_tuning_kubelet_register_taints: [] for this pool and taint its nodes otherwise."))
    want = render(f"{value} --config-dir={config_dir}")
    finish("dropin", want, config_dir)


if __name__ == "__main__":
    main()
