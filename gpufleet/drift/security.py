"""Which pending changes weaken what apt or munge trusts: those are security findings, not just "differs".

apt installs a package only when the repository's Release file is signed by a key the source accepts.
Three edits on a host defeat that while every package still "installs fine": ``trusted=yes`` on a source
(unsigned or forged metadata accepted), a ``signed-by`` removed (any key in apt's global keyrings may sign
for the repository) or pointed at another keyring, and a repository keyring whose content (its key and
fingerprint) differs from the one gpufleet installs. The check run already carries the host's file and the
desired one (``--diff``); this module compares them. Nothing here runs on the hosts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

# The grammar lives with the code the hosts run (the apt_source_adopt module reads sources with it); re-exported.
from gpufleet.module_utils.apt_sources import Source as Source
from gpufleet.module_utils.apt_sources import parse_sources as parse_sources

Severity = Literal["security", "normal"]

_SOURCE_DIRS = ("/etc/apt/sources.list.d/",)
_SOURCE_FILES = ("/etc/apt/sources.list",)
_KEYRING_DIRS = ("/etc/apt/keyrings/", "/usr/share/keyrings/", "/etc/apt/trusted.gpg.d/")
#: Source options that turn signature checks off or down (sources.list(5)).
_INSECURE = {"trusted": "apt accepts its packages unsigned", "allow-insecure": "apt accepts an unsigned Release",
             "allow-weak": "apt accepts weak signatures",
             "allow-downgrade-to-insecure": "apt accepts the loss of its signature"}
#: apt's refusal to read its sources when two entries name one repository with different values of an option
#: (apt-pkg/sourcelist.cc): ``E: Conflicting values set for option Signed-By regarding source URI SUITE: A != B``,
#: ``Error:`` in apt 3; Ansible's apt module joins the lines with ``,`` (e.g. gantsign/ansible-role-visual-studio-code
#: issue 263, free-pmx/free-pmx-no-subscription issue 15, microsoft/linux-package-repositories issue 69).
_APT_CONFLICT = re.compile(r"Conflicting values set for option (?P<option>[A-Za-z-]+) regarding source (?P<uri>\S+) "
                           r"(?P<suite>\S*?): (?P<a>[^\n]*?) != (?P<b>[^\n]*?)\s*(?=,?\s*(?:E:|Error:|W:)|$)",
                           re.MULTILINE)


def is_source(path: str) -> bool:
    return path in _SOURCE_FILES or (path.startswith(_SOURCE_DIRS) and path.endswith((".list", ".sources")))


def is_keyring(path: str) -> bool:
    return path.startswith(_KEYRING_DIRS) or PurePosixPath(path).suffix in (".gpg", ".asc", ".kbx")


@dataclass(frozen=True)
class AptConflict:
    """Two sources for one repository that apt refuses to read together."""

    option: str
    uri: str
    suite: str
    values: tuple[str, str]

    @property
    def severity(self) -> Severity:
        # A Trusted conflict means one of the copies is trusted=yes: a source apt would read unsigned.
        return "security" if self.option.lower() == "trusted" else "normal"

    def message(self) -> str:
        a, b = (v or "(unset)" for v in self.values)
        what = "one copy is trusted=yes (unsigned)" if self.severity == "security" else f"{a} != {b}"
        return (f"apt source conflict: {self.uri} {self.suite} is configured more than once with different "
                f"{self.option} ({what}); apt reads no source until one remains (`gpufleet audit` names the files)")


def apt_conflicts(text: str) -> list[AptConflict]:
    """The source conflicts apt reported in ``text`` (a failed task's message and output), each once."""
    seen: dict[tuple[str, str, str], AptConflict] = {}
    for m in _APT_CONFLICT.finditer(text):
        c = AptConflict(m["option"], m["uri"], m["suite"], (m["a"].strip(), m["b"].strip().rstrip(",")))
        seen.setdefault((c.option, c.uri, c.suite), c)
    return list(seen.values())


def _yes(value: str | None) -> bool:
    return (value or "").lower() in ("yes", "true", "1")


def source_findings(on_host: str, desired: str) -> list[str]:
    """Why the host's version of a source file is less trusted than the desired one (empty: it is not)."""
    want = {(s.uri.rstrip("/"), s.suite): s for s in parse_sources(desired)}
    reasons: list[str] = []
    for s in parse_sources(on_host):
        w = want.get((s.uri.rstrip("/"), s.suite))
        for opt, why in _INSECURE.items():
            if _yes(s.options.get(opt)) and not (w is not None and _yes(w.options.get(opt))):
                reasons.append(f"{opt}=yes on {s.uri}: {why}")
        if w is None:
            continue
        have_key, want_key = s.options.get("signed-by"), w.options.get("signed-by")
        if want_key and not have_key:
            reasons.append(f"signed-by removed from {s.uri}: any key apt trusts may sign it (expected {want_key})")
        elif want_key and have_key != want_key:
            reasons.append(f"signed-by of {s.uri} is {have_key}, expected {want_key}")
    return list(dict.fromkeys(reasons))


def keyring_finding(path: str, on_host: Any, desired: Any) -> str:
    """A repository keyring that differs from the key gpufleet installs (another key, another fingerprint),
    or is missing."""
    if on_host in (None, "") or (isinstance(on_host, Mapping) and on_host.get("state") == "absent"):
        return f"signing key {path} missing"
    if isinstance(on_host, str) and isinstance(desired, str) and on_host != desired:
        return f"signing key {path} differs from the pinned key (another key or fingerprint)"
    return f"signing key {path} differs from the pinned key"


_UNKNOWN = object()


def task_files(action: str, res: Mapping[str, Any], diffs: list[dict[str, Any]]) -> list[tuple[str, Any, Any]]:
    """(path, on the host, desired) of each file a changed task would write; content ``_UNKNOWN`` when the
    module shows no diff (get_url)."""
    by_header = {str(d.get("before_header")): d for d in diffs if "before" in d or "after" in d}
    out: list[tuple[str, Any, Any]] = []
    files = res.get("files")
    if isinstance(files, list):  # the project's managed_files module
        for f in files:
            if isinstance(f, Mapping) and f.get("changed") and f.get("dest"):
                dest = str(f["dest"])
                d = by_header.get(dest, {})
                before = "" if f.get("state") == "created" else d.get("before", _UNKNOWN)
                out.append((dest, before, d.get("after", _UNKNOWN)))
        return out
    path = res.get("dest") or res.get("path")
    if isinstance(path, str):
        d = by_header.get(path) or (diffs[0] if diffs else {})
        out.append((path, d.get("before", _UNKNOWN), d.get("after", _UNKNOWN)))
    return out


#: The key munge authenticates every Slurm message with (roles/slurm), and the start of the message the role's
#: report task gives when a host's key is not the cluster's or not 0400 munge:munge: digests and mode, no content.
MUNGE_KEY = "/etc/munge/munge.key"
_MUNGE_REPORT = f"munge key {MUNGE_KEY} on "


def munge_key_findings(action: str, res: Mapping[str, Any]) -> dict[str, list[str]]:
    """{path: reasons} for roles/slurm's munge key report: a key that is not the cluster's lets a host forge or
    reject Slurm's messages, one readable by others lets anyone there forge them."""
    msg = res.get("msg")
    if action.rsplit(".", 1)[-1] != "debug" or not isinstance(msg, str) or not msg.startswith(_MUNGE_REPORT):
        return {}
    reasons = []
    if "the cluster key is sha256" in msg:
        reasons.append("munge key differs from the cluster's (by digest)")
    if "mode 0400 munge:munge" not in msg:
        reasons.append("munge key mode or owner is not 0400 munge:munge")
    return {MUNGE_KEY: reasons or ["munge key differs from the cluster's"]}


def adopt_findings(action: str, res: Mapping[str, Any]) -> dict[str, list[str]]:
    """{path: reasons} for the other sources of a managed repository that the ``apt_source_adopt`` module would
    replace and that turn signature checks off (its ``replaced[].options``, read with the shared grammar)."""
    out: dict[str, list[str]] = {}
    if action.rsplit(".", 1)[-1] != "apt_source_adopt":
        return out
    for r in res.get("replaced") or []:
        if not isinstance(r, Mapping) or not isinstance(r.get("options"), Mapping):
            continue
        reasons = [f"{opt}=yes on {r.get('uri') or 'the repository'}: {why}" for opt, why in _INSECURE.items()
                   if _yes(str(r["options"].get(opt) or ""))]
        if reasons:
            out[str(r.get("path"))] = reasons
    return out


def task_findings(action: str, res: Mapping[str, Any], diffs: list[dict[str, Any]]) -> dict[str, list[str]]:
    """{path: reasons} for a changed task's files that weaken apt's or munge's trust."""
    out: dict[str, list[str]] = munge_key_findings(action, res) or adopt_findings(action, res)
    if out:
        return out
    for path, before, after in task_files(action, res, diffs):
        if is_source(path):
            if before is _UNKNOWN or after is _UNKNOWN:
                continue
            if reasons := source_findings(before if isinstance(before, str) else "",
                                          after if isinstance(after, str) else ""):
                out[path] = reasons
        elif is_keyring(path):
            if before is _UNKNOWN:
                out[path] = [f"signing key {path} differs from the pinned key, or is missing"]
            else:
                out[path] = [keyring_finding(path, before, after)]
    return out
