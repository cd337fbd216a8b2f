"""What dpkg says about each package of a host, read from the check run's own results.

Package findings must name the installed version and the hold state whatever apt would do (issue 13), and
an interrupted dpkg run (``iU``, ``iHR``) is a finding of its own. The roles already read dpkg in every run,
check mode included: ``dpkg_hold`` returns each name's selection and installed version, and ``dpkg-query -W
-f=FORMAT`` commands print the fields their format names. This module folds those results, whatever
task or role they come from, into one state per package per host; it never runs anything on the hosts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

#: dpkg's want/status letters (``dpkg-query -l``/``${db:Status-Abbrev}``, see dpkg-query(1)).
_WANT = {"u": "unknown", "i": "install", "h": "hold", "r": "deinstall", "p": "purge"}
_STATUS = {"n": "not-installed", "c": "config-files", "H": "half-installed", "U": "unpacked",
           "F": "half-configured", "W": "triggers-awaited", "t": "triggers-pending", "i": "installed"}
#: Statuses a dpkg run leaves behind when it was stopped between unpacking and configuring:
#: ``dpkg --audit`` lists them and apt refuses to work until ``dpkg --configure -a``.
INTERRUPTED = frozenset({"half-installed", "unpacked", "half-configured", "triggers-awaited"})
_ABSENT = frozenset({"not-installed", "config-files"})
_FIELD = re.compile(r"\$\{([^}]+)\}")
# A field's value: one word; Status-Abbrev is three characters, the last a space when no error flag is set.
_VALUE = {"db:Status-Abbrev": r"(...?)", "Status": r"(\S+ \S+ \S+)"}
_ACTIONS_HOLD = frozenset({"dpkg_hold"})
_ACTIONS_COMMAND = frozenset({"ansible.builtin.command", "command", "ansible.legacy.command"})


@dataclass(frozen=True)
class PackageState:
    """One package on one host, as far as the run's dpkg reads tell."""

    name: str
    version: str | None = None
    #: install | hold | deinstall | purge | unknown; None when no read gave it.
    selection: str | None = None
    #: installed, unpacked, half-installed, ...; None when no read gave it.
    status: str | None = None
    #: dpkg's reinst-required flag (the ``R`` of ``iHR``).
    reinst_required: bool = False

    @property
    def installed(self) -> bool:
        return self.version is not None and self.status not in _ABSENT

    @property
    def interrupted(self) -> bool:
        return self.status in INTERRUPTED or self.reinst_required

    @property
    def abbrev(self) -> str:
        """``ii``, ``hi``, ``iU``, ``iHR``: what ``dpkg -l`` shows."""
        want = next((k for k, v in _WANT.items() if v == self.selection), "?")
        status = next((k for k, v in _STATUS.items() if v == self.status), "?")
        return want + status + ("R" if self.reinst_required else "")

    def interrupted_text(self) -> str:
        """``gfc 1.0 half-installed, reinstall required (iHR)``."""
        what = {"unpacked": "unpacked, not configured", "half-configured": "half-configured",
                "half-installed": "half-installed", "triggers-awaited": "awaiting triggers"}.get(
                    self.status or "", self.status or "?")
        if self.reinst_required:
            what += ", reinstall required"
        return f"{self.name} {self.version or ''} {what} ({self.abbrev})".replace("  ", " ")

    def hold_text(self) -> str:
        if self.selection is None:
            return "hold state not read"
        return "held" if self.selection == "hold" else "not held"

    def merge(self, other: PackageState) -> PackageState:
        """This state completed with what a later read knows; the later read wins where both know."""
        return replace(self, version=other.version if other.version is not None else self.version,
                       selection=other.selection or self.selection, status=other.status or self.status,
                       reinst_required=other.reinst_required or self.reinst_required)


def _format_of(argv: list[str]) -> str | None:
    for n, arg in enumerate(argv):
        for flag in ("-f=", "--showformat="):
            if arg.startswith(flag):
                return arg[len(flag):]
        if arg in ("-f", "--showformat") and n + 1 < len(argv):
            return argv[n + 1]
    return None


def _line_pattern(fmt: str) -> tuple[re.Pattern[str], list[str]]:
    fields: list[str] = []
    parts: list[str] = []
    pos = 0
    fmt = fmt.replace("\\n", "\n").replace("\\t", "\t").rstrip("\n")
    for m in _FIELD.finditer(fmt):
        parts.append(re.escape(fmt[pos:m.start()]))
        fields.append(m.group(1))
        parts.append(_VALUE.get(m.group(1), r"(\S*)"))
        pos = m.end()
    parts.append(re.escape(fmt[pos:]))
    return re.compile("^" + "".join(parts) + r"\s*$"), fields


def parse_dpkg_query(argv: Any, stdout: str) -> list[PackageState]:
    """States from a ``dpkg-query -W -f=FORMAT …`` run: whichever of Package, Version, db:Status-Want,
    db:Status-Status, db:Status-Eflag, db:Status-Abbrev and Status its format prints."""
    if not isinstance(argv, list) or not argv or str(argv[0]).rsplit("/", 1)[-1] != "dpkg-query":
        return []
    args = [str(a) for a in argv]
    if not {"-W", "--show"} & set(args) or (fmt := _format_of(args)) is None:
        return []
    pattern, fields = _line_pattern(fmt)
    if "Package" not in fields:
        return []
    out = []
    for line in stdout.splitlines():
        m = pattern.match(line)
        if not m:
            continue
        v = dict(zip(fields, m.groups(), strict=True))
        selection, status, reinst = v.get("db:Status-Want"), v.get("db:Status-Status"), False
        if "Status" in v:
            selection, _, status = v["Status"].split(" ")
        if abbrev := v.get("db:Status-Abbrev"):
            selection = _WANT.get(abbrev[0], selection)
            status = _STATUS.get(abbrev[1:2], status)
            reinst = abbrev[2:3] == "R"
        if v.get("db:Status-Eflag") == "reinstreq":
            reinst = True
        version = v.get("Version") or None
        out.append(PackageState(v["Package"], version if status not in _ABSENT else None, selection or None,
                                status or None, reinst))
    return out


def parse_dpkg_hold(res: Mapping[str, Any]) -> list[PackageState]:
    """States from the project's ``dpkg_hold`` module (``before``: selections, ``installed``: versions,
    ``status``: dpkg's status, ``interrupted``: every package of the host an interrupted dpkg run left behind,
    named or not; the last two are absent from results of older module versions). Read before the module's own
    recovery (``recover``), so check mode and the run that recovers report the same states."""
    before, installed, status = res.get("before"), res.get("installed"), res.get("status")
    if not isinstance(before, Mapping):
        return []
    versions = installed if isinstance(installed, Mapping) else {}
    statuses = status if isinstance(status, Mapping) else {}
    broken = res.get("interrupted") if isinstance(res.get("interrupted"), Mapping) else {}
    assert isinstance(broken, Mapping)
    out = []
    for name, selection in before.items():
        if name in broken:
            continue  # as found before the recovery, below
        version, st = versions.get(name), statuses.get(name)
        if selection == "not installed":
            out.append(PackageState(str(name), None, None, str(st or "not-installed")))
        else:
            out.append(PackageState(str(name), str(version) if version else None, str(selection),
                                    str(st) if st else None))
    for name, b in broken.items():
        if isinstance(b, Mapping):
            out.append(PackageState(str(name), str(b["version"]) if b.get("version") else None,
                                    str(b.get("selection") or "") or None, str(b.get("status") or "") or None,
                                    bool(b.get("reinst_required"))))
    return out


def named_by(action: str, res: Mapping[str, Any]) -> set[str]:
    """The packages a dpkg read asked for by name (``dpkg_hold``'s ``interrupted`` also lists others)."""
    if action.rsplit(".", 1)[-1] in _ACTIONS_HOLD:
        before = res.get("before")
        return {str(n) for n in before} if isinstance(before, Mapping) else set()
    return {s.name for s in states_of(action, res)}


def states_of(action: str, res: Mapping[str, Any]) -> list[PackageState]:
    """The package states one task result tells (none for tasks that do not read dpkg)."""
    if action.rsplit(".", 1)[-1] in _ACTIONS_HOLD:
        return parse_dpkg_hold(res)
    if action in _ACTIONS_COMMAND:
        return parse_dpkg_query(res.get("cmd"), str(res.get("stdout") or ""))
    return []


def fold(reads: Iterable[tuple[str, str, Mapping[str, Any]]]) -> dict[str, dict[str, PackageState]]:
    """(host, action, res) in run order -> {host: {package: state}}."""
    out: dict[str, dict[str, PackageState]] = {}
    for host, action, res in reads:
        pkgs = out.setdefault(host, {})
        for st in states_of(action, res):
            pkgs[st.name] = pkgs[st.name].merge(st) if st.name in pkgs else st
    return out
