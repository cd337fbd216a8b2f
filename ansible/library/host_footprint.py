#!/usr/bin/python
"""Ansible module: read everything gpufleet's roles manage on a host as one digest, and compare or record it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_footprint
short_description: One digest of the host state gpufleet's roles manage, probed against or recorded as converged
description:
  - Reads, in one run, every kind of state gpufleet's roles manage or decide from - dpkg's status database (versions,
    selections, holds, half-installed states), the configuration trees under O(paths) (content, mode, owner, symlink
    targets, device numbers), systemd unit file states and the units that are not inactive, the kernel's command line,
    release, managed modules, the values of every sysctl key the sysctl.d files set, the mounts of the fstab mount
    points, the settings of every GPU that C(nvidia-smi -q -x) reports and the GPU/NIC topology C(nvidia-smi topo -m)
    shows (through the topology parser the roles use) - and hashes it. A symbolic link counts with its final target's
    state (type, mode, owner, size, inode, modification time), and O(files) are stat'ed the same way.
  - O(state=record) writes that digest to O(stamp) under O(scope), with the controller's O(inputs) digest (the role
    code and the host's variables) and O(cluster) digest (the inventory's groups). O(state=probe) reports
    C(converged) when the stamp holds, for one of O(scopes), the same inputs, the same cluster where
    O(cluster_counts), and the same digest, no O(blockers) path exists and C(nvidia-smi) answered (the role's tasks
    would change nothing; they are idempotent, which every Molecule scenario checks), so the role can be skipped.
  - A record keeps only the scopes whose digest is the current one. The stamp holds digests only, no file content.
  - Read-only in check mode; O(state=record) writes nothing there.
options:
  state:
    description:
      - C(probe) compares, C(record) writes the stamp.
      - C(cluster) is answered by the action plugin, without a module run (ansible/site.yml's first play, C(run_once))
        - the cluster digest every probe and record of the run then takes from O(run).
    type: str
    choices: [probe, record, cluster]
    default: probe
  scopes:
    description: >-
      The stamp scopes; probe accepts any of them (C(*) any recorded one), record writes each (one reading,
      one write).
    type: list
    elements: str
    required: true
  inputs:
    description: Digest of what the controller decides from (role code, host variables); the action plugin sets it.
    type: str
    default: ""
  cluster:
    description: Digest of the cluster the templates read (the inventory's group map); the action plugin sets it.
    type: str
    default: ""
  cluster_counts:
    description: The probing role reads the cluster (groups, other hosts), so a recorded O(cluster) must be this one.
    type: bool
    default: true
  reads:
    description: What to read.
    type: dict
    default: {}
    suboptions:
      paths:
        description: Files, directories (recursive; a link is not walked, its final target's stat counts), globs.
        type: list
        elements: str
        default: []
      files:
        description:
          - Globs of files the roles run or check outside the trees of O(paths) (programs, a toolkit's directory),
            each described by its C(stat) only (type, mode, owner, size, inode, modification time; links followed),
            never read or walked. The action plugin adds every role's C(meta/footprint.yml) C(relies_on) list.
        type: list
        elements: str
        default: []
      blockers:
        description: Globs; any existing match makes the probe report not converged (a pending reboot the roles report).
        type: list
        elements: str
        default: []
      kernel_modules:
        description: Globs of /proc/modules names that count, besides those the modules-load.d files name.
        type: list
        elements: str
        default: []
      dpkg_status:
        description: dpkg's status database; empty to leave packages out.
        type: str
        default: /var/lib/dpkg/status
      units:
        description: Read systemd unit states.
        type: bool
        default: true
      nvidia_smi:
        description:
          - nvidia-smi; its absence counts as state, its failure blocks the probe. Empty to leave GPUs out.
          - Its C(topo -m) matrix, parsed by the roles' topology parser, and the CPU thread siblings count as state.
        type: str
        default: nvidia-smi
      stamp:
        description: Where the recorded state lives (digests only).
        type: str
        default: /var/lib/gpufleet/footprint.json
      root:
        description: Prefix of every path read (tests run the module against a scratch tree).
        type: str
        default: /
  probe:
    description: Action plugin option; false makes a probe report not converged without reading the host.
    type: bool
    default: true
  previous:
    description:
      - Action plugin option, the result this task registered last on the host this run. A probe reuses its reading
        while it said converged (nothing has run since) and every run computes the inputs digest once.
    type: dict
    default: {}
  run:
    description: Action plugin option, the result of O(state=cluster) this run (its cluster digest), when there is one.
    type: dict
    default: {}
  inputs_exclude:
    description: Action plugin option; globs of variable names left out of the inputs digest (set during a run).
    type: list
    elements: str
    default: []
  roles:
    description:
      - With O(state=record), stored in each recorded scope's entry - the roles whose probe ran on the host in the run
        that records (the action plugin sets it for the C(site) scope). A host site.yml's first play finds converged
        skips them all; the drift report names them as its components.
    type: list
    elements: str
    default: []
author: gpufleet
"""

EXAMPLES = r"""
- name: Probe the host against the state its last converge recorded
  host_footprint:
    scopes: [nvidia_driver, site]
    reads:
      paths: [/etc/apt, /etc/modprobe.d, /run/gpufleet]
      blockers: [/run/gpufleet/*.reboot-required]
"""

RETURN = r"""
converged:
  description: The stamp holds this state and these inputs for one of the scopes, and nothing blocks.
  returned: always
  type: bool
reason:
  description: Why not converged (no record, inputs changed, which sections differ, what blocks), or which scope held.
  returned: always
  type: str
digest:
  description: The state's digest.
  returned: always
  type: str
sections:
  description: Section name -> digest (paths per entry, files, dpkg, units, kernel, gpus, topology).
  returned: always
  type: dict
recorded:
  description: Scopes the stamp holds after this run, each with its inputs, cluster and digest.
  returned: always
  type: dict
"""

import fnmatch
import glob
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_smi_xml import SETTINGS, SmiXmlError, parse_smi_xml
from ansible.module_utils.gpufleet_topology import TopologyError, parse_topo_m

SCHEMA = 1
#: systemd unit file states that belong to no administrator's decision (units pulled in by others, made at run time).
_UNIT_FILE_STATES_IGNORED = frozenset({"static", "transient", "generated", "alias", "bad"})
#: What the slurm role's gpu_topology reads for Cores= (threads per core); the matrix alone does not say it.
_SIBLINGS = "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"
_MAX_HOPS = 40


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def final_target(root: str, path: str) -> str:
    """The host path a path resolves to, every link in it followed inside root (a chroot's realpath, no I/O outside).

    A loop or a chain longer than the kernel's 40 hops stops at the entry it reached: its state is then "a link".
    """
    parts = [p for p in path.split("/") if p]
    resolved = ""
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            resolved = resolved.rsplit("/", 1)[0]
            continue
        candidate = f"{resolved}/{name}"
        try:
            target = os.readlink(_rooted(root, candidate))
        except OSError:  # not a link, or absent: the path goes on (or ends) here
            resolved = candidate
            continue
        hops += 1
        if hops > _MAX_HOPS:
            return candidate
        if target.startswith("/"):
            resolved = ""
        parts = [p for p in target.split("/") if p] + parts
    return resolved or "/"


#: Trees the kernel and udev make at run time: an entry there is identified without its modification time (kernfs
#: stamps a directory when a child appears), which moves by itself.
_RUNTIME_TREES = ("/sys/", "/proc/", "/dev/", "/run/")


def identity(path: str, host_path: str = "") -> str:
    """What says an entry was removed, replaced or changed without reading it: type, mode, owner, and for files and
    directories size, inode and modification time (a directory's changes when an entry in it comes or goes)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"error {e.errno}"
    head = f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return f"{'char' if stat.S_ISCHR(st.st_mode) else 'block'} {head} {os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    if (host_path or path).startswith(_RUNTIME_TREES):
        return f"{kind} {head} {st.st_ino}"
    return f"{kind} {head} {st.st_size} {st.st_ino} {st.st_mtime_ns}"


def _describe(path: str, root: str = "/") -> str:
    """One line for one filesystem entry: type, mode, owner and what identifies its content; a link with its text,
    its final target and that target's identity (removing the directory at a chain's end changes no link's text)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"error {e.errno}"
    head = f"{stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        final = final_target(root, path[len(root) - 1:] if root != "/" else path)
        return f"link {os.readlink(path)} -> {final} {identity(_rooted(root, final), final)}"
    if stat.S_ISDIR(st.st_mode):
        return f"dir {head}"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind = "char" if stat.S_ISCHR(st.st_mode) else "block"
        return f"{kind} {head} {os.major(st.st_rdev)},{os.minor(st.st_rdev)}"
    if stat.S_ISREG(st.st_mode):
        try:
            with open(path, "rb") as f:
                return f"file {head} {_sha(f.read())}"
        except OSError as e:
            return f"file {head} error {e.errno}"
    return f"other {head}"


def _walk(path: str, skip: str, root: str = "/") -> Iterator[tuple[str, str]]:
    """(path, description) for the entry and, for a directory, everything under it (symlinks not walked into)."""
    if path == skip:
        return
    desc = _describe(path, root)
    yield path, desc
    if desc.startswith("dir "):
        try:
            names = sorted(os.listdir(path))
        except OSError as e:
            yield path + "/", f"error {e.errno}"
            return
        for name in names:
            yield from _walk(os.path.join(path, name), skip, root)


def _rooted(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root != "/" else path


def paths_sections(root: str, patterns: list[str], skip: str) -> dict[str, str]:
    """One section per pattern: the digest of every entry it matches (a pattern matching nothing is "absent")."""
    out: dict[str, str] = {}
    for pattern in patterns:
        full = _rooted(root, pattern)
        matches = sorted(glob.glob(full)) if glob.has_magic(full) else [full]
        lines = [f"{p[len(root) - 1:] if root != '/' else p}\t{d}" for m in matches for p, d in _walk(m, skip, root)]
        out[f"path:{pattern}"] = _sha("\n".join(lines or ["absent"]).encode())
    return out


def files_section(root: str, patterns: list[str]) -> str:
    """The identity of each file the roles run or check (links followed): one stat each, no content read."""
    lines = []
    for pattern in sorted(set(patterns)):
        full = _rooted(root, pattern)
        matches = sorted(glob.glob(full)) if glob.has_magic(full) else [full]
        host = [m[len(root) - 1:] if root != "/" else m for m in matches]
        lines += [f"{pattern}\t{h}\t{identity(_rooted(root, t), t)}" for h in host
                  for t in [final_target(root, h)]] or [
            f"{pattern}\tabsent"]
    return _sha("\n".join(lines).encode())


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _conf_lines(root: str, pattern: str) -> Iterator[str]:
    for path in sorted(glob.glob(_rooted(root, pattern))):
        for line in (_read(path) or "").splitlines():
            line = line.strip()
            if line and not line.startswith(("#", ";")):
                yield line


def kernel_section(root: str, module_globs: list[str]) -> str:
    """Kernel release, command line, the managed modules loaded, sysctl values set by files, fstab mounts."""
    cmdline = (_read(_rooted(root, "/proc/cmdline")) or "").strip()
    lines = [f"release {os.uname().release} {os.uname().machine}", f"cmdline {cmdline}"]
    wanted = list(module_globs) + [ln.split()[0] for ln in _conf_lines(root, "/etc/modules-load.d/*.conf")]
    loaded = sorted(ln.split()[0] for ln in (_read(_rooted(root, "/proc/modules")) or "").splitlines() if ln.strip())
    lines += [f"module {m}" for m in loaded if any(fnmatch.fnmatchcase(m, w) for w in wanted)]
    settings = [*_conf_lines(root, "/etc/sysctl.d/*.conf"), *_conf_lines(root, "/etc/sysctl.conf")]
    keys = sorted({ln.split("=", 1)[0].strip() for ln in settings if "=" in ln})
    for key in keys:
        value = _read(_rooted(root, "/proc/sys/" + key.lstrip("-").replace(".", "/")))
        lines.append(f"sysctl {key} {' '.join(value.split()) if value is not None else 'absent'}")
    points = {ln.split()[1] for ln in _conf_lines(root, "/etc/fstab") if len(ln.split()) >= 2}
    mounts = (_read(_rooted(root, "/proc/mounts")) or "").splitlines()
    lines += sorted(f"mount {' '.join(m.split()[:4])}" for m in mounts
                    if len(m.split()) >= 4 and m.split()[1] in points)
    return _sha("\n".join(lines).encode())


def units_section(module: AnsibleModule) -> str:
    """Every unit file's enablement, and the units not inactive among those an administrator decides about."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return _sha(b"no systemctl")
    rc, files, err = module.run_command([systemctl, "list-unit-files", "--no-legend", "--no-pager", "--plain"])
    if rc != 0:
        return _sha(f"systemctl failed {rc} {err.strip()}".encode())
    states = {}
    for line in files.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1]
    rc, units, err = module.run_command([systemctl, "list-units", "--all", "--no-legend", "--no-pager", "--plain",
                                         "--type=service,socket,timer"])
    lines = [f"file {u} {s}" for u, s in sorted(states.items())]
    for line in units.splitlines():
        parts = line.split()
        # Inactive units come and go from this list as systemd loads and collects them: absent and inactive are one.
        if len(parts) >= 3 and parts[2] != "inactive" and states.get(parts[0], "bad") not in _UNIT_FILE_STATES_IGNORED:
            lines.append(f"active {parts[0]} {parts[2]}")
    return _sha("\n".join(sorted(lines)).encode())


def gpus_section(module: AnsibleModule, smi: str) -> tuple[str, str | None]:
    """The settings gpu_settings manages on every GPU (persistence, power limit, application clocks) and the driver.

    Returns (digest, blocker): a driver that does not answer blocks the probe (the roles report it every run).
    """
    path = smi if os.path.isabs(smi) else module.get_bin_path(smi)
    if not path or not os.path.exists(path):
        return _sha(b"no nvidia-smi"), None
    rc, out, _err = module.run_command([path, "-q", "-x"])
    if rc != 0:
        return _sha(f"rc {rc}".encode()), f"nvidia-smi -q -x failed with exit {rc}"
    try:
        report = parse_smi_xml(out)
    except SmiXmlError as e:
        return _sha(b"unparsable"), f"nvidia-smi -q -x: {e}"
    lines = [f"driver {report.driver_version}"]
    for g in report.gpus:
        lines.append(" ".join([str(g.index), str(g.uuid), str(g.mig_mode)]
                              + [f"{k}={getattr(g, f)}" for k, f in sorted(SETTINGS.items())]))
    return _sha("\n".join(lines).encode()), None


def topology_section(module: AnsibleModule, smi: str, root: str) -> str:
    """The GPU/NIC matrix gres.conf (Links=, Cores=) and NCCL_IB_HCA are rendered from, read by the same command and
    parser as the roles' gpu_topology module, and the thread siblings it turns CPU ids into cores with."""
    siblings = (_read(_rooted(root, _SIBLINGS)) or "absent").strip()
    path = smi if os.path.isabs(smi) else module.get_bin_path(smi)
    if not path or not os.path.exists(path):
        return _sha(f"no nvidia-smi\nsiblings {siblings}".encode())
    rc, out, _err = module.run_command([path, "topo", "-m"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        return _sha(f"topo rc {rc}\nsiblings {siblings}".encode())
    try:
        model: Any = parse_topo_m(out).to_dict()
    except TopologyError as e:  # the roles leave their files as they are and say so: that is a state too
        model = f"unreadable: {e}"
    return _sha(json.dumps({"topology": model, "siblings": siblings}, sort_keys=True, default=str).encode())


def read_state(module: AnsibleModule, p: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    root = p["root"] if p["root"].endswith("/") else p["root"] + "/"
    stamp = _rooted(root, p["stamp"])
    sections = paths_sections(root, p["paths"], stamp)
    if p["files"]:
        sections["files"] = files_section(root, p["files"])
    blockers = [m for g in p["blockers"] for m in sorted(glob.glob(_rooted(root, g)))]
    if p["dpkg_status"]:
        try:
            with open(_rooted(root, p["dpkg_status"]), "rb") as f:
                sections["dpkg"] = _sha(f.read())
        except OSError as e:
            sections["dpkg"] = _sha(f"error {e.errno}".encode())
    if p["units"]:
        sections["units"] = units_section(module)
    sections["kernel"] = kernel_section(root, p["kernel_modules"])
    if p["nvidia_smi"]:
        sections["gpus"], blocked = gpus_section(module, p["nvidia_smi"])
        if blocked:
            blockers.append(blocked)
        else:  # a driver that does not answer blocks already; its topology would only repeat that
            sections["topology"] = topology_section(module, p["nvidia_smi"], root)
    return sections, blockers


def digest_of(sections: dict[str, str]) -> str:
    return _sha(json.dumps(sections, sort_keys=True).encode())


def load_stamp(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else {}


def holds(entry: Any, inputs: str, cluster: str, cluster_counts: bool, digest: str) -> bool:
    """A recorded scope is this run's: same inputs, same state, and the same cluster where the role reads it."""
    return (isinstance(entry, dict) and entry.get("inputs") == inputs and entry.get("footprint") == digest
            and (not cluster_counts or entry.get("cluster") == cluster))


def compare(stamp: dict[str, Any], scopes: list[str], inputs: str, digest: str, sections: dict[str, str],
            blockers: list[str], cluster: str = "", cluster_counts: bool = True) -> tuple[bool, str]:
    if blockers:
        return False, "pending: " + ", ".join(blockers)
    recorded = stamp.get("scopes") or {}
    held = sorted(recorded) if "*" in scopes else [s for s in scopes if s in recorded]
    if not held:
        return False, "no record of a converge"
    for s in held:
        if holds(recorded[s], inputs, cluster, cluster_counts, digest):
            return True, f"as the last converge ({s}) left it"
    if all(recorded[s].get("inputs") != inputs for s in held):
        return False, "inputs changed since the last converge (role code or host variables)"
    if cluster_counts and all(recorded[s].get("cluster") != cluster for s in held):
        return False, "cluster changed since the last converge (group membership or other hosts' variables)"
    before = stamp.get("sections") or {}
    differ = sorted(k for k in set(before) | set(sections) if before.get(k) != sections.get(k))
    return False, "state changed since the last converge: " + (", ".join(differ) or "?")


def write_stamp(path: str, stamp: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(stamp, f, sort_keys=True, indent=1)
        f.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["probe", "record", "cluster"], "default": "probe"},
            "scopes": {"type": "list", "elements": "str", "required": True},
            "inputs": {"type": "str", "default": ""},
            "cluster": {"type": "str", "default": ""},
            "cluster_counts": {"type": "bool", "default": True},
            "reads": {"type": "dict", "default": {}, "options": {
                "paths": {"type": "list", "elements": "str", "default": []},
                "files": {"type": "list", "elements": "str", "default": []},
                "blockers": {"type": "list", "elements": "str", "default": []},
                "kernel_modules": {"type": "list", "elements": "str", "default": []},
                "dpkg_status": {"type": "str", "default": "/var/lib/dpkg/status"},
                "units": {"type": "bool", "default": True},
                "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                "stamp": {"type": "str", "default": "/var/lib/gpufleet/footprint.json"},
                "root": {"type": "str", "default": "/"},
            }},
            "probe": {"type": "bool", "default": True},
            "previous": {"type": "dict", "default": {}},
            "run": {"type": "dict", "default": {}},
            "inputs_exclude": {"type": "list", "elements": "str", "default": []},
            # The site record: the roles probed on the host in the run that writes it (what a converged host skips).
            "roles": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    reads = p["reads"]
    if p["state"] == "cluster":
        module.fail_json(msg="state=cluster is answered by the action plugin (roles/host_footprint), never here")
    if not p["scopes"] or not p["inputs"]:
        module.fail_json(msg="scopes and inputs are required (the action plugin computes inputs)")
    root = reads["root"] if reads["root"].endswith("/") else reads["root"] + "/"
    stamp_path = _rooted(root, reads["stamp"])
    sections, blockers = read_state(module, reads)
    digest = digest_of(sections)
    stamp = load_stamp(stamp_path)
    if p["state"] == "probe":
        converged, reason = compare(stamp, p["scopes"], p["inputs"], digest, sections, blockers, p["cluster"],
                                    p["cluster_counts"])
        module.exit_json(changed=False, converged=converged, reason=reason, digest=digest, sections=sections,
                         recorded=stamp.get("scopes") or {}, blockers=blockers)
    kept = {s: v for s, v in (stamp.get("scopes") or {}).items()
            if isinstance(v, dict) and v.get("footprint") == digest}
    for scope in p["scopes"]:
        kept[scope] = {"inputs": p["inputs"], "footprint": digest, "cluster": p["cluster"]}
        if p["roles"]:
            kept[scope]["roles"] = sorted(p["roles"])
    new = {"schema": SCHEMA, "scopes": kept, "sections": sections}
    if new != stamp and not module.check_mode:
        try:
            write_stamp(stamp_path, new)
        except OSError as e:
            module.fail_json(msg=f"{stamp_path}: {e}")
    # The stamp is gpufleet's own record of a converged state, not a setting of the host: never a change.
    module.exit_json(changed=False, converged=False, reason=f"recorded ({', '.join(p['scopes'])})", digest=digest,
                     sections=sections,
                     recorded=kept if not module.check_mode else stamp.get("scopes") or {}, blockers=blockers)


if __name__ == "__main__":
    main()
