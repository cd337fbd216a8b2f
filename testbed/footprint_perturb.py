"""The perturbations the footprint agreement test (molecule/shared/agree.yml, issue 26 point 2) applies to a node.

The converged-host skip is exact only if roles/host_footprint's probe sees everything a role decides from. The
agreement test perturbs a converged node, reads the probe, and where the probe still says converged runs the
scenario's converge with the probe off: it must then change nothing. The perturbations are generated here from
what the roles themselves name, never from the footprint's own lists (``host_footprint_paths``,
``meta/footprint.yml``): a test built from those would only find what the footprint already reads.

Sources, per role with a probe (and the roles it imports, whose tasks run under it):
- ``path``: every absolute path its tasks, templates, defaults and vars name (a Jinja expression inside a path
  becomes a glob: ``/usr/local/cuda-{{ v }}/bin`` is ``/usr/local/cuda-*/bin``);
- ``program``: the first word of every command it runs (a role default's value where the command is one);
- ``package``: the pinned_packages components it installs (the node's ``gpufleet-<component>.pref`` names the
  packages; the node samples their ``dpkg -L`` files);
- ``group``: the inventory groups its files read (``groups['slurm_controller']``), where the test adds a host.
The node adds what a path leads to: a link's final target, and the GPU topology the simulator's ``topo -m`` prints
(testbed/footprint_perturb_host.py). Standard library only: the action plugin and the tests import it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypedDict

import yaml


class Candidate(TypedDict):
    """What a role names, before the node expands it into perturbations."""

    role: str
    kind: str  # path | program | package
    pattern: str


#: host_footprint is the subject under test, not a role that manages the host.
_SUBJECT = "host_footprint"
_SUFFIXES = (".yml", ".yaml", ".j2")
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}")
#: Absolute paths of host state a role could decide from; /dev, /proc and /sys are the kernel's (read-only or
#: device nodes an unprivileged container cannot make again) and are left to the footprint's kernel sections.
_PATH = re.compile(r"(?<![\w.{}*-])(/(?:etc|usr|run|var|opt|srv|boot|lib)/[A-Za-z0-9_./*-]+)")
#: The first word of a command a task runs: ``argv: [x, ...]``, ``argv:`` then ``- x``, ``command: x ...``, ``cmd: x``.
_RUNS = re.compile(r"^\s*(?:argv:\s*\[\s*['\"]?|argv:\s*\n\s*-\s*['\"]?|ansible\.builtin\.command:\s+['\"]?|"
                   r"ansible\.builtin\.shell:\s+['\"]?|cmd:\s+['\"]?)([A-Za-z0-9_./{}-][A-Za-z0-9_./{} -]*?)['\",\s\]]",
                   re.M)
_ROLE_REF = re.compile(r"^\s*(?:-\s+)?(?:name|role):\s*['\"]?([a-z][a-z0-9_]*)['\"]?\s*$", re.M)
_TASKS_REF = re.compile(r"\.\./\.\./([a-z][a-z0-9_]*)/tasks/")
_COMPONENT = re.compile(r"^\s*pinned_packages_component:\s*['\"]?([A-Za-z0-9_.{}* -]+?)['\"]?\s*$", re.M)
#: ``groups['name']``, ``groups.name``, and ``groups[variable]`` (returned as ``{{ variable }}``, for the caller to
#: resolve with the host's variables).
_GROUPS = re.compile(r"groups\s*\[\s*(?:['\"]([A-Za-z0-9_-]+)['\"]|([a-z_][a-z0-9_]*))\s*\]"
                     r"|groups\.([A-Za-z_][A-Za-z0-9_]*)")
#: Programs whose loss would take the test's own tools with it (the node's restore runs python3 under bash), or
#: that read only: never perturbed.
_KEEP = re.compile(r"^(?:/usr)?(?:/s?bin/)?(?:python3?[0-9.]*|bash|sh|dash|env|sudo|systemctl|journalctl|"
                   r"apt(?:-get|-mark|-cache)?|dpkg(?:-query)?|which|command|test|true|false|cat|sed|grep|awk|find|ls|rm|mv|cp|ln|"
                   r"mkdir|chmod|chown|stat|sleep|timeout|getent|id|uname)$")


def _role_dirs(roles: Path) -> dict[str, Path]:
    return {p.name: p for p in sorted(roles.iterdir()) if p.is_dir() and p.name != _SUBJECT}


def _files(role: Path) -> list[Path]:
    # meta/footprint.yml is the footprint's own list: the source the test must not use.
    return [p for p in sorted(role.rglob("*")) if p.is_file() and p.suffix in _SUFFIXES
            and p.name != "footprint.yml" and "__pycache__" not in p.parts]


def _text(role: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in _files(role))


def probing_roles(roles: Path) -> list[str]:
    """The roles that import host_footprint's probe (the roles the converged-host skip can skip)."""
    return [name for name, path in _role_dirs(roles).items()
            if any("tasks_from: probe" in p.read_text(errors="replace") for p in (path / "tasks").glob("*.yml"))]


def closure(roles: Path, role: str) -> list[str]:
    """The role and every role it includes, imports (also by a task file path) or depends on, transitively."""
    dirs = _role_dirs(roles)
    seen, todo = [role], [role]
    while todo:
        r = todo.pop()
        if r not in dirs:
            continue
        text = _text(dirs[r])
        for used in sorted({*_ROLE_REF.findall(text), *_TASKS_REF.findall(text)}):
            if used in dirs and used not in seen:
                seen.append(used)
                todo.append(used)
    return seen


def converge_roles(converge: Path, roles: Path) -> list[str]:
    """The roles with a probe that a scenario's converge.yml runs, directly or through the roles it names."""
    named = _ROLE_REF.findall(converge.read_text())
    probing = set(probing_roles(roles))
    out: list[str] = []
    for role in named:
        for r in closure(roles, role):
            if r in probing and r not in out:
                out.append(r)
    return out


def _defaults(role: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for part in ("defaults", "vars"):
        f = role / part / "main.yml"
        if f.exists():
            data = yaml.safe_load(f.read_text())
            if isinstance(data, dict):
                out |= data
    return out


def _glob_of(text: str) -> str:
    """A path with its Jinja expressions as globs, runs of stars as one."""
    return re.sub(r"\*+", "*", _JINJA.sub("*", text))


def candidates(roles: Path, role: str) -> list[Candidate]:
    """What the role (and the roles it imports) names: paths, programs and package components, deduplicated."""
    dirs = _role_dirs(roles)
    out: list[Candidate] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, pattern: str) -> None:
        if (kind, pattern) not in seen:
            seen.add((kind, pattern))
            out.append({"role": role, "kind": kind, "pattern": pattern})

    for name in closure(roles, role):
        if name not in dirs:
            continue
        defaults = _defaults(dirs[name])
        for f in _files(dirs[name]):
            raw = f.read_text(errors="replace")
            for m in _PATH.finditer(_glob_of(raw)):
                path = m.group(1).rstrip("/.")
                if path.count("/") >= 2 and path.rstrip("*/") != "":
                    add("path", path)
            for m in _RUNS.finditer(raw):
                words = m.group(1).split()
                word = words[0] if words else ""
                ref = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", m.group(1).strip())
                if ref and isinstance(defaults.get(ref.group(1)), str):
                    word = str(defaults[ref.group(1)])
                if word and "{" not in word and not _KEEP.match(word):
                    add("program", word)
            for m in _COMPONENT.finditer(raw):
                comp = _glob_of(m.group(1).strip())
                if comp and comp != "*":
                    add("package", comp)
        for var, value in defaults.items():
            if var.endswith(("_nvidia_smi", "_ctk")) and isinstance(value, str) and not _KEEP.match(value):
                add("program", value)
    return out


def groups_read(roles: Path, role: str) -> list[str]:
    """The inventory groups the role's files (and those of the roles it imports) read: names, or ``{{ var }}``."""
    dirs = _role_dirs(roles)
    found: set[str] = set()
    for name in closure(roles, role):
        if name in dirs:
            for quoted, var, attr in _GROUPS.findall(_text(dirs[name])):
                found.add(quoted or attr or "{{ " + var + " }}")
    return sorted(found - {"keys", "values", "items", "get"})
