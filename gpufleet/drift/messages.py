"""One human line per pending change, from a check-mode task result.

Each module family says "from what to what" in its own way: apt in its simulated ``Inst`` lines, the
``gpu_settings`` module in per-GPU before/after, file modules in a before/after diff, systemd in the unit's
status. Anything else falls back to the task's name and message, so no pending change goes unreported.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from gpufleet.ansible_run import TaskResult
from gpufleet.drift.dpkg import PackageState

Kind = Literal["package", "hold", "dpkg", "gpu_setting", "file", "service", "sysctl", "mount", "kernel_module",
               "cpu_governor", "reboot", "other"]

#: ``apt-get -s`` says what it would do as ``Inst <pkg> [<installed>] (<candidate> <origin> [<arch>])``.
_INST = re.compile(r"^Inst (?P<pkg>\S+)(?: \[(?P<old>[^\]]+)\])? \((?P<new>\S+)", re.MULTILINE)
_APT_ACTIONS = frozenset({"ansible.builtin.apt", "ansible.builtin.package", "apt", "package"})
_FILE_ACTIONS = frozenset({
    "ansible.builtin.template", "ansible.builtin.copy", "ansible.builtin.lineinfile",
    "ansible.builtin.blockinfile", "ansible.builtin.file", "template", "copy", "lineinfile", "blockinfile", "file",
    "managed_files",
    # The project's module (ansible/library): the kubelet unit's drop-in that adds --config-dir.
    "kubelet_config_dir",
    # The project's module (ansible/library): other sources of a repository a role manages, to be replaced.
    "apt_source_adopt",
})
_SERVICE_ACTIONS = frozenset({
    "ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service",
    "systemd_service", "systemd", "service",
})
_SYSCTL_ACTIONS = frozenset({"ansible.posix.sysctl", "sysctl", "sysctl_settings"})
# dpkg_hold is the project's one-call module (ansible/library); dpkg_selections loops come from users' own roles.
_HOLD_ACTIONS = frozenset({"ansible.builtin.dpkg_selections", "dpkg_selections", "dpkg_hold"})
_MOUNT_ACTIONS = frozenset({"ansible.posix.mount", "mount"})
_REBOOT_ACTIONS = frozenset({"ansible.builtin.reboot", "reboot"})
# kernel_module is the project's module (ansible/library); modprobe from users' own roles reads the same.
_MODULE_ACTIONS = frozenset({"kernel_module", "community.general.modprobe", "modprobe"})
# cpu_governor is the project's module (ansible/library): it returns the CPUs whose governor differs.
_GOVERNOR_ACTIONS = frozenset({"cpu_governor"})
_GPU_ACTIONS = frozenset({"gpu_settings"})
_GPU_FIELDS: dict[str, tuple[str, str]] = {
    "power_limit_w": ("power limit", "W"),
    "clocks_memory_mhz": ("memory application clock", "MHz"),
    "clocks_graphics_mhz": ("graphics application clock", "MHz"),
}


def kind_of(action: str) -> Kind:
    short = action.rsplit(".", 1)[-1]
    if action in _APT_ACTIONS:
        return "package"
    if action in _HOLD_ACTIONS:
        return "hold"
    if action in _GPU_ACTIONS or short == "gpu_settings":
        return "gpu_setting"
    if action in _FILE_ACTIONS:
        return "file"
    if action in _SERVICE_ACTIONS:
        return "service"
    if action in _SYSCTL_ACTIONS:
        return "sysctl"
    if action in _MOUNT_ACTIONS:
        return "mount"
    if action in _REBOOT_ACTIONS:
        return "reboot"
    if action in _MODULE_ACTIONS:
        return "kernel_module"
    if action in _GOVERNOR_ACTIONS or short == "cpu_governor":
        return "cpu_governor"
    return "other"


def gpu_list(indices: Iterable[int]) -> str:
    """``GPU3``, ``GPU0,2`` or ``GPU0-7``: short enough for one line on an 8-GPU node."""
    idx = sorted(set(indices))
    if len(idx) > 2 and idx == list(range(idx[0], idx[-1] + 1)):
        return f"GPU{idx[0]}-{idx[-1]}"
    return "GPU" + ",".join(str(i) for i in idx)


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


PackageStates = Mapping[str, PackageState]


def _hold_of(pkg: str, state: PackageStates | None) -> str:
    st = (state or {}).get(pkg)
    return st.hold_text() if st is not None else "hold state not read"


def package_messages(stdout: str, diff: list[dict[str, Any]], state: PackageStates | None = None) -> list[str]:
    """``a, b: X installed, Y locked; not held`` per version pair and hold state (dpkg's, read by the run);
    apt's summary when the Inst lines were cut."""
    pairs: dict[tuple[str | None, str, str, str], list[str]] = {}
    for m in _INST.finditer(stdout):
        pkg = m.group("pkg")
        st = (state or {}).get(pkg)
        # apt leaves out [old] for a package dpkg knows only half (unpacked, half-installed): dpkg still has it.
        old = m.group("old") or (st.version if st is not None and st.installed else None)
        how = "installed"
        if st is not None and st.interrupted:
            # Left half done by an interrupted dpkg run: dpkg's version and state, not apt's (apt names the version
            # it last saw configured, where dpkg has the new one unpacked).
            old, how = st.version or old, f"{st.status} ({st.abbrev})"
        pairs.setdefault((old, how, m.group("new"), _hold_of(pkg, state)), []).append(pkg)
    out = []
    for (old, how, new, hold), pkgs in pairs.items():
        have = f"{old} {how}" if old else "not installed"
        out.append(f"{', '.join(pkgs)}: {have}, {new} locked; {hold}")
    if not out:
        prepared = [str(d.get("prepared", "")).strip() for d in diff if d.get("prepared")]
        out.extend(p.splitlines()[-1] for p in prepared if p)
    return out


def gpu_messages(gpus: Any) -> list[str]:
    """``GPU3 power limit 500 W, expected 700 W``; GPUs with the same from/to share one line."""
    groups: dict[str, list[int]] = {}
    if not isinstance(gpus, list):
        return []
    for g in gpus:
        if not isinstance(g, Mapping):
            continue
        before, after = g.get("before") or {}, g.get("after") or {}
        for field in g.get("changes") or []:
            if field == "persistence_mode":
                text = (f"persistence mode {'on' if before.get(field) else 'off'}, "
                        f"expected {'on' if after.get(field) else 'off'}")
            else:
                name, unit = _GPU_FIELDS.get(field, (field, ""))
                text = f"{name} {_num(before.get(field))} {unit}, expected {_num(after.get(field))} {unit}"
            groups.setdefault(text.replace("  ", " ").strip(), []).append(int(g.get("index", -1)))
    return [f"{gpu_list(idx)} {text}" for text, idx in groups.items()]


def unified(diff: Mapping[str, Any]) -> str:
    """A unified diff of one before/after pair (what ``--diff`` prints), empty when there is no text."""
    before, after = diff.get("before"), diff.get("after")
    if not isinstance(before, str) or not isinstance(after, str):
        return ""
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True),
        # after_header is the rendered temp file; the destination is what the operator knows.
        fromfile=f"{diff.get('before_header', 'before')} (on the host)",
        tofile=f"{diff.get('before_header', 'after')} (desired)",
    )
    return "".join(lines)


#: ``NAME=VALUE`` lines of settings files (/etc/nccl.conf, sysctl.d): a name, ``=``, a value without spaces.
_SETTING = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(\S*)\s*$")


def _settings(text: str) -> dict[str, str] | None:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _SETTING.match(line)
        if m is None:
            return None
        out[m.group(1)] = m.group(2)
    return out


def setting_changes(before: Any, after: Any) -> list[str]:
    """``NCCL_IB_HCA =mlx5_0 -> =mlx5_0,mlx5_3`` for each setting of a NAME=VALUE file that differs (comments
    aside); empty when either side is not such a file, so the caller says "differs" and shows the diff."""
    if not isinstance(before, str) or not isinstance(after, str):
        return []
    b, a = _settings(before), _settings(after)
    if b is None or a is None:
        return []
    return [f"{k} {b.get(k, '(unset)')} -> {a.get(k, '(unset)')}"
            for k in dict.fromkeys([*a, *b]) if b.get(k) != a.get(k)]


def _differs(path: Any, diffs: Iterable[Mapping[str, Any]]) -> str:
    changes = [c for d in diffs for c in setting_changes(d.get("before"), d.get("after"))]
    return f"{path}: {'; '.join(changes)}" if changes else f"{path} differs"


def file_message(task: TaskResult, res: Mapping[str, Any]) -> tuple[str, str]:
    """``/etc/nccl.conf: NCCL_DEBUG INFO -> WARN`` for NAME=VALUE files, else ``... differs`` (or ``missing``),
    with the diff that would be applied."""
    path = res.get("dest") or res.get("path")
    diffs = [d for d in task.diff if "before" in d or "after" in d]
    if not path and diffs:
        path = diffs[0].get("before_header") or diffs[0].get("after_header")
    text = "".join(unified(d) for d in diffs)
    state = res.get("state")
    before = diffs[0].get("before") if diffs else None
    if state == "absent" or before == "" or (isinstance(before, Mapping) and before.get("state") == "absent"):
        return f"{path or task.task} missing", text
    if diffs and all(isinstance(d.get("before"), Mapping) for d in diffs):
        changes = sorted({k for d in diffs for k in d["after"] if d["after"].get(k) != d["before"].get(k)})
        attrs = ", ".join(f"{k} {d['before'].get(k)} -> {d['after'].get(k)}" for d in diffs for k in changes)
        return f"{path or task.task}: {attrs}", ""
    return _differs(path or task.task, diffs), text


def managed_files_messages(task: TaskResult, res: Mapping[str, Any]) -> tuple[list[str], str]:
    """One line per file the project's ``managed_files`` module would change, and their diffs."""
    lines = []
    for f in res.get("files") or []:
        if not isinstance(f, Mapping) or not f.get("changed"):
            continue
        dest, state = f.get("dest"), f.get("state")
        if state == "created":
            lines.append(f"{dest} missing")
        elif state == "attributes":
            before, after = f.get("before") or {}, f.get("after") or {}
            attrs = ", ".join(f"{k} {before.get(k)} -> {after.get(k)}" for k in after if before.get(k) != after.get(k))
            lines.append(f"{dest}: {attrs}")
        else:
            lines.append(_differs(dest, (d for d in task.diff if d.get("before_header") == dest)))
    text = "".join(unified(d) for d in task.diff if d.get("before") != d.get("after"))
    return lines, text


def adopt_messages(task: TaskResult, res: Mapping[str, Any]) -> list[str]:
    """One line per other source of a managed repository the ``apt_source_adopt`` module would replace
    (issue 28 point 4): apt refuses to read any source while it is there next to gpufleet's."""
    lines = []
    for r in res.get("replaced") or []:
        if not isinstance(r, Mapping) or not r.get("path"):
            continue
        what = "lines of the repository" if r.get("kind") == "edit" else "another source of the repository"
        lines.append(f"{r['path']}: {what} gpufleet manages; converge replaces it (kept as {r.get('copy')})")
    return lines or [f"{task.task}: other sources of the repository would be replaced"]


def service_message(task: TaskResult, res: Mapping[str, Any]) -> str:
    """``nvidia-persistenced: disabled, inactive; expected enabled, started``."""
    name = res.get("name") or task.task
    status = res.get("status") if isinstance(res.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    have, want = [], []
    if "enabled" in res:
        have.append(str(status.get("UnitFileState", "?")))
        want.append("enabled" if res["enabled"] else "disabled")
    if "state" in res:
        have.append(str(status.get("ActiveState", "?")))
        want.append(str(res["state"]))
    if not want:
        return f"{name}: {task.task}"
    return f"{name}: {', '.join(have)}; expected {', '.join(want)}"


def _selection_target(task: TaskResult) -> str:
    """``hold`` or ``install``: what a dpkg_hold task would set (its diff's after side), hold by default."""
    for d in task.diff:
        after = d.get("after")
        if d.get("after_header") == "dpkg selections" and isinstance(after, str) and after.strip():
            return after.split()[-1]
    return "hold"


#: What ansible.posix.mount changes in each state: it reports only "changed", not which of the two moved.
_MOUNT_PENDING = {
    "present": "missing from /etc/fstab or different there",
    "mounted": "not mounted, or missing from /etc/fstab or different there",
}


def mount_messages(res: Mapping[str, Any]) -> list[str]:
    """``Lustre mount /lustre/checkpoints (10.0.0.5@o2ib:/ai/checkpoints, _netdev,flock): missing from /etc/fstab or
    different there`` per mount (loop item) that would change; the module returns its arguments, and the full result
    (``raw``) its ``state`` too."""
    listed = res.get("results")
    results: list[Any] = listed if isinstance(listed, list) else [res]
    out = []
    for r in results:
        if not isinstance(r, Mapping) or not r.get("changed"):
            continue
        fstype = r.get("fstype")
        what = "Lustre mount" if fstype == "lustre" else (f"{fstype} mount" if fstype else "mount")
        state = ((r.get("invocation") or {}).get("module_args") or {}).get("state")
        pending = _MOUNT_PENDING.get(str(state), "not mounted or not in /etc/fstab as expected")
        out.append(f"{what} {r.get('name') or r.get('path')} ({r.get('src')}, {r.get('opts')}): {pending}")
    return out
def module_message(task: TaskResult, res: Mapping[str, Any]) -> str:
    """``kernel module nvidia_peermem: not loaded, expected loaded`` (modprobe's name and wanted state)."""
    args = (res.get("invocation") or {}).get("module_args") or {}
    name = res.get("name") or args.get("name") or task.task
    present = (res.get("state") or args.get("state") or "present") == "present"
    return (f"kernel module {name}: not loaded, expected loaded" if present
            else f"kernel module {name}: loaded, expected unloaded")


def governor_message(task: TaskResult, res: Mapping[str, Any]) -> str:
    """``CPU governor powersave on cpu0-3 (4 of 8 CPUs), expected performance``; CPUs grouped by governor."""
    differing = res.get("differing")
    want = res.get("governor") or "the configured governor"
    if not isinstance(differing, Mapping) or not differing:
        return f"CPU governor: {task.task}"
    groups: dict[str, list[int]] = {}
    for cpu, have in differing.items():
        groups.setdefault(str(have), []).append(int(str(cpu).removeprefix("cpu") or -1))
    total = res.get("cpus")
    parts = []
    for have, cpus in groups.items():
        of = f" of {total}" if isinstance(total, int) else ""
        parts.append(f"{have} on {gpu_list(cpus).replace('GPU', 'cpu')} ({len(cpus)}{of} CPUs)")
    return f"CPU governor {'; '.join(parts)}, expected {want}"


def interrupted_message(states: list[PackageState]) -> str:
    """One line for the packages an interrupted dpkg run left behind (what ``dpkg --audit`` lists)."""
    return (f"dpkg was interrupted: {'; '.join(s.interrupted_text() for s in states)}; "
            "converge recovers it (`dpkg --configure -a`, then the pinned install)")


def hold_messages(task: TaskResult, res: Mapping[str, Any], state: PackageStates | None) -> list[str]:
    """``a, b: 2.26.2-1+cuda12.8 installed, as locked; not held, expected held`` per installed version.

    A release (selection ``install``) precedes a package's move to its locked version: ``held at X, released
    to move to the locked version``."""
    listed = res.get("changed_packages")
    if listed == [] and res.get("recovered"):
        return []  # changed for the recovery of an interrupted dpkg run alone: its own finding says so
    pkgs = ([str(p) for p in listed] if isinstance(listed, list) and listed
            else [i.item for i in task.items if i.changed] or [str(res.get("item", task.task))])
    installed = res.get("installed") if isinstance(res.get("installed"), Mapping) else {}
    assert isinstance(installed, Mapping)
    release = _selection_target(task) == "install"
    groups: dict[tuple[str | None, str], list[str]] = {}
    for pkg in pkgs:
        st = (state or {}).get(pkg)
        version = installed.get(pkg) or (st.version if st is not None else None)
        groups.setdefault((str(version) if version else None, _hold_of(pkg, state)), []).append(pkg)
    out = []
    for (version, hold), names in groups.items():
        if release:
            out.append(f"{', '.join(names)}: held at {version or 'an unread version'}, "
                       "released to move to the locked version")
        elif version is None:
            out.append(f"{', '.join(names)}: installed version not read; {hold}, expected held")
        else:
            out.append(f"{', '.join(names)}: {version} installed, as locked; {hold}, expected held")
    return out


def sysctl_messages(task: TaskResult, res: Mapping[str, Any]) -> list[str]:
    """One line per setting that differs: the sysctl_settings module's ``settings`` (file or running value), or
    ansible.posix.sysctl's loop items (``name=value`` labels)."""
    settings = res.get("settings")
    if isinstance(settings, list):
        changed = [s for s in settings if isinstance(s, Mapping) and s.get("changed")]
        lines = [f"sysctl {s.get('name')} differs, expected {s.get('value')}" for s in changed]
        if not lines and res.get("file_changed"):
            lines = [f"sysctl file: {task.task}: lines other than the settings"]
        return lines or [f"sysctl: {task.task}"]
    lines = []
    for label in (i.item for i in task.items if i.changed):
        name, _, want = label.partition("=")
        lines.append(f"sysctl {name} differs, expected {want}" if want else f"sysctl {name} differs")
    return lines or [f"sysctl: {task.task}"]


def messages(task: TaskResult, raw: Mapping[str, Any] | None = None,
             state: PackageStates | None = None) -> tuple[Kind, list[str], str]:
    """(kind, lines, diff text) for one task that would change. ``raw`` is the untrimmed module result,
    ``state`` the host's packages as dpkg reported them during the run (``gpufleet.drift.dpkg``)."""
    res: Mapping[str, Any] = raw if raw is not None else task.res
    kind = kind_of(task.action)
    if kind == "package":
        lines = package_messages(str(res.get("stdout") or ""), task.diff, state)
        args = (res.get("invocation") or {}).get("module_args") or {}
        index_only = args.get("update_cache") and not args.get("name") and args.get("upgrade") in (None, "no", False)
        if not lines and index_only:
            # An index refresh alone (after a source or key change): no package moves because of it.
            return kind, [f"{task.task}: the package index would be refreshed (no package named)"], ""
        return kind, lines or [f"{task.task}: packages differ from the lock"], ""
    if kind == "hold":
        return kind, hold_messages(task, res, state), ""
    if kind == "gpu_setting":
        return kind, gpu_messages(res.get("gpus")) or [f"{task.task}: GPU settings differ"], ""
    if kind == "file" and isinstance(res.get("replaced"), list):
        return kind, adopt_messages(task, res), ""
    if kind == "file" and isinstance(res.get("files"), list):
        lines, text = managed_files_messages(task, res)
        return kind, lines or [f"{task.task}: files differ"], text
    if kind == "file":
        line, text = file_message(task, res)
        return kind, [line], text
    if kind == "service":
        return kind, [service_message(task, res)], ""
    if kind == "sysctl":
        return kind, sysctl_messages(task, res), ""
    if kind == "mount":
        return kind, mount_messages(res) or [f"{task.task}: mounts differ"], ""
    if kind == "reboot":
        return kind, [f"reboot: {task.task}"], ""
    if kind == "kernel_module":
        return kind, [module_message(task, res)], ""
    if kind == "cpu_governor":
        return kind, [governor_message(task, res)], ""
    msg = (task.msg or "").strip()
    return kind, [f"{task.task}: {msg}" if msg else f"{task.task} would change"], ""
