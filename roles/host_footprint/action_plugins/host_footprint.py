"""Action plugin of the host_footprint module: the inputs digest on the controller, and a probe that reuses a reading.

The inputs digest is what the controller decides from: the code of every role and of ansible/ (modules, plugins,
playbooks), ansible-core's version, and the host's variables whose names carry a role's prefix or ``gpufleet_`` or
are a role default's name (inventory, group_vars, host_vars, extra vars; templated), less ``inputs_exclude``.
It is the host's view without a play (``hostvars``), so every role of a run computes the same one; a run computes
it once and carries it in the registered result.

A probe whose previous result on this host (this run) said converged reuses that reading instead of running the
module: every role since was skipped, so nothing on the host has changed. Any other previous result (a record, a
probe that did not hold, none) runs the module. A record after such a probe writes nothing when the stamp already
holds the scope for that reading, and runs no module either.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

#: roles/host_footprint/action_plugins/host_footprint.py -> the repository (roles/ and ansible/ side by side).
_REPO = Path(__file__).resolve().parents[3]
_CODE_TREES = ("roles", "ansible")
_code: str | None = None


def code_digest(repo: Path = _REPO) -> str:
    """sha256 over the path and bytes of every file under roles/ and ansible/ (bytecode left out)."""
    global _code
    if _code is not None and repo == _REPO:
        return _code
    h = hashlib.sha256()
    for top in _CODE_TREES:
        for dirpath, dirnames, filenames in os.walk(repo / top):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".retry")):
                    continue
                path = Path(dirpath) / name
                h.update(str(path.relative_to(repo)).encode() + b"\0")
                try:
                    h.update(path.read_bytes())
                except OSError as e:
                    h.update(f"error {e.errno}".encode())
                h.update(b"\0")
    digest = h.hexdigest()
    if repo == _REPO:
        _code = digest
    return digest


def role_prefixes(repo: Path = _REPO) -> list[str]:
    """The variable prefixes that are inputs: every role's name, and gpufleet."""
    roles = sorted(p.name for p in (repo / "roles").iterdir() if p.is_dir())
    return ["gpufleet", *roles]


def default_names(repo: Path = _REPO) -> set[str]:
    """Every variable a role's defaults define: the lock's (gpufleet_defaults: kernel_version) carry no role prefix."""
    names: set[str] = set()
    for path in sorted((repo / "roles").glob("*/defaults/main.yml")):
        names |= {m.group(1) for m in re.finditer(r"^([a-z][a-z0-9_]*):", path.read_text(), re.M)}
    return names


def select_inputs(variables: Mapping[str, Any], prefixes: list[str], exclude: list[str],
                  names: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """The variables (templated on access) whose names carry a prefix or a role default's name, less the excluded."""
    rx = re.compile("^({})_".format("|".join(re.escape(p) for p in prefixes)))
    out: dict[str, Any] = {}
    for name in sorted(variables):
        if not (rx.match(name) or name in names) or any(fnmatch.fnmatchcase(name, g) for g in exclude):
            continue
        try:
            out[name] = variables[name]
        except Exception as e:  # an undefined reference is a value too, the same every run
            out[name] = f"<{type(e).__name__}>"
    return out


def inputs_digest(variables: Mapping[str, Any], exclude: list[str], ansible_version: str) -> str:
    payload = {"code": code_digest(), "ansible": ansible_version,
               "vars": select_inputs(variables, role_prefixes(), exclude, default_names())}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def reuse(previous: Mapping[str, Any], scopes: list[str], inputs: str) -> dict[str, Any] | None:
    """The probe answered from the previous reading, when it said converged; None to read the host again."""
    if not previous.get("converged") or previous.get("failed") or not previous.get("digest"):
        return None
    recorded = previous.get("recorded") or {}
    names = sorted(recorded) if "*" in scopes else scopes
    held = [s for s in names if (recorded.get(s) or {}) == {"inputs": inputs, "footprint": previous["digest"]}]
    return {
        "changed": False, "converged": bool(held), "digest": previous["digest"], "recorded": dict(recorded),
        "sections": dict(previous.get("sections") or {}), "blockers": [], "reread": False,
        "reason": f"as the last converge ({held[0]}) left it, read earlier this run" if held
        else "no record of a converge for " + ", ".join(scopes),
    }


def already_recorded(previous: Mapping[str, Any], scopes: list[str], inputs: str) -> dict[str, Any] | None:
    """A record with nothing to write: the reading this run still holds (converged) and the stamp has the scope."""
    held = reuse(previous, scopes, inputs)
    if held is None or not held["converged"]:
        return None
    held["reason"] = f"recorded ({scopes[0]}), unchanged"
    return held


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        previous = args.pop("previous", None) or {}
        exclude = list(args.pop("inputs_exclude", None) or [])
        probe = boolean(args.pop("probe", True), strict=False)
        scopes = list(args.get("scopes") or [])
        # Which call and for which scopes, in the result: the break-and-restore callback reads the probes' answers.
        result.update(footprint_state=args.get("state", "probe"), scopes=scopes)
        if not isinstance(previous, Mapping):
            previous = {}
        inputs = previous.get("inputs")
        if not inputs:
            host = task_vars.get("inventory_hostname", "")
            hostvars = task_vars.get("hostvars") or {}
            version = str((task_vars.get("ansible_version") or {}).get("full", ""))
            inputs = inputs_digest(hostvars.get(host, {}), exclude, version)
        if args.get("state", "probe") == "probe":
            if not probe:
                result.update(changed=False, converged=False, reason="probe off (host_footprint_probe)",
                              inputs=inputs, reread=False)
                return result
            reused = reuse(previous, scopes, inputs)
            if reused is not None:
                result.update(reused, inputs=inputs)
                return result
        elif (held := already_recorded(previous, scopes[:1], inputs)) is not None:
            result.update(held, inputs=inputs)
            return result
        args["inputs"] = inputs
        result.update(self._execute_module(module_name="host_footprint", module_args=args, task_vars=task_vars))
        result["inputs"] = inputs
        result.setdefault("reread", True)
        return result
