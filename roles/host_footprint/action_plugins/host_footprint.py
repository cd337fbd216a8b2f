"""Action plugin of the host_footprint module: the inputs digest on the controller, and a probe that reuses a reading.

The inputs digest is what the controller decides from: the code of every role and of ansible/ (modules, plugins,
playbooks), ansible-core's version, and the host's variables whose names carry a role's prefix or ``gpufleet_`` or
are a role default's name (inventory, group_vars, host_vars, extra vars; templated), less ``inputs_exclude``.
It is the host's view without a play (``hostvars``), so every role of a run computes the same one; a run computes
it once and carries it in the registered result.

The cluster digest, and which roles read the cluster, are computed once per host and run too (carried likewise).
The cluster digest is what a role's templates read beyond the host's own variables: the inventory's group map
(slurm.conf lists every compute node) and, once any managed role names ``hostvars``, every host's role inputs.
Which roles read it is derived from their files (``cluster_readers``), and only their probes compare it; every
record stores it. The files each role runs or checks outside the footprint's trees come from its
``meta/footprint.yml`` (``relies_on``), read here and handed to the module as ``reads.files``.

A record refuses any run that is not a whole, unfiltered run of its role (``partial_run``): ``--start-at-task``,
``--step``, a ``--limit`` for a role that reads other hosts, or a role whose own probe did not run this run
(the scopes probed so far travel in every result as ``probed``).

A probe whose previous result on this host (this run) said converged reuses that reading instead of running the
module: every role since was skipped, so nothing on the host has changed. A probe whose previous result read the
stamp this run, and found no entry for the probe's scopes with this run's inputs, answers "not converged" without
a module run (``unrecorded``): the stamp changes only through a record, whose result carries the stamp it wrote,
and no state can make an entry with other inputs hold. Any other previous result runs the module. A record after
a converged probe writes nothing when the stamp already holds the scope for that reading, and runs no module
either.

Under ``ansible/site.yml`` (``defer: true``, set by its imports) a role's record is left to the site record that
the last play writes for every host that came through every play: one stamp write per host and run instead of
one per role. Under ``--limit`` the site record writes, in that one write, an entry for each role probed on the
host that reads nothing of other hosts (``limited_scopes``); the site scope, which claims the cluster, is refused.
Recording each role as it ends would leave the earlier roles' entries stale as soon as a later role changed the
host (an entry holds one reading of the whole host), so a no-op rerun of a node converged with ``--limit`` would
run them all again. A run whose site record would be refused otherwise (``--start-at-task``, ``--step``) keeps the
per-role records, so what such a run proves is still recorded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import ansible.context
import yaml
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


#: Names through which a template or task reads beyond its own host's variables (the inventory, other hosts, the
#: play's host list). A word match, comments included: a false match costs a rerun, a miss a wrong skip.
_CLUSTER_WORDS = re.compile(r"\b(groups|hostvars|play_hosts|ansible_play_hosts(?:_all)?|ansible_play_batch|"
                            r"ansible_limit|delegate_to|run_once)\b")
_ROLE_REF = re.compile(r"^\s*(?:name|role):\s*['\"]?([a-z][a-z0-9_]*)['\"]?\s*$", re.M)
_SUFFIXES = (".yml", ".yaml", ".j2")


def _role_text(role: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(role.rglob("*"))
                     if p.is_file() and p.suffix in _SUFFIXES and "__pycache__" not in p.parts)


def cluster_readers(repo: Path = _REPO) -> dict[str, set[str]]:
    """Role -> the cluster words its files, and the files of the roles it imports or depends on, use.

    host_footprint itself is left out (its own files name these words for the record's rules, not for a template).
    """
    roles = {p.name: p for p in sorted((repo / "roles").iterdir()) if p.is_dir() and p.name != "host_footprint"}
    # Only the roles that probe decide from the cluster for a skip (drain reads hostvars but never skips).
    texts = {name: _role_text(path) for name, path in roles.items()}
    own = {name: {m.group(1) for m in _CLUSTER_WORDS.finditer(text)} for name, text in texts.items()}
    uses = {name: {m.group(1) for m in _ROLE_REF.finditer(text)} & set(roles) - {name}
            for name, text in texts.items()}
    out: dict[str, set[str]] = {}
    for name in roles:
        seen, todo, words = {name}, [name], set()
        while todo:
            r = todo.pop()
            words |= own[r]
            todo += [u for u in uses[r] if u not in seen]
            seen |= uses[r]
        if "tasks_from: probe" in texts[name]:
            out[name] = words
    return out


def reads_cluster(scope: str, readers: Mapping[str, Any]) -> bool:
    """Whether a scope's probe compares the cluster: a role that reads it, and site or any other unknown scope."""
    return bool(readers.get(scope, ["groups"]))


def relies_on(repo: Path = _REPO) -> list[str]:
    """Every role's ``meta/footprint.yml`` ``relies_on``: files it runs or checks outside host_footprint_paths."""
    out: set[str] = set()
    for path in sorted((repo / "roles").glob("*/meta/footprint.yml")):
        data = yaml.safe_load(path.read_text()) or {}
        out |= {str(f) for f in data.get("relies_on") or []}
    return sorted(out)


def cluster_digest(variables: Mapping[str, Any], readers: Mapping[str, Any], exclude: list[str]) -> str:
    """The inventory's group map, and every host's role inputs when some role reads other hosts' variables."""
    groups = variables.get("groups") or {}
    payload: dict[str, Any] = {"groups": {g: sorted(str(h) for h in hosts) for g, hosts in sorted(groups.items())
                                          if g != CONVERGED_GROUP}}
    if any("hostvars" in words for words in readers.values()):
        hostvars = variables.get("hostvars") or {}
        prefixes, names = role_prefixes(), default_names()
        payload["hosts"] = {str(h): select_inputs(hostvars.get(h) or {}, prefixes, exclude, names)
                            for h in sorted(groups.get("all") or [])}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


#: The group ansible/site.yml's first play puts converged hosts in (roles/host_footprint/tasks/site.yml): a run's
#: own bookkeeping, not the inventory's, so never part of the cluster digest.
CONVERGED_GROUP = "gpufleet_converged"


def partial_run(cliargs: Mapping[str, Any], scope: str, cluster_counts: bool, previous: Mapping[str, Any],
                roles: Collection[str] = ()) -> str:
    """Why a record would claim more than this run proved ("" when the run is whole for the scope).

    Check mode and --tags/--skip-tags are refused in record.yml's conditions, before this runs.
    """
    if cliargs.get("start_at_task"):
        return "--start-at-task ran part of the play"
    if cliargs.get("step"):
        return "--step may have skipped tasks"
    if cliargs.get("subset") and cluster_counts:
        return "--limit leaves out hosts this role reads"
    # The scopes whose probe ran this run travel in every result (a role may include another that probes and
    # records in between: nvidia_driver includes nvidia_repo).
    # Only a role's scope: site, and molecule/shared/break_one.yml's restore-baseline, have no probe of their own.
    if scope in roles and scope not in (previous.get("probed") or []):
        return f"the {scope} role's probe did not run this run"
    return ""


def limit_only(cliargs: Mapping[str, Any]) -> bool:
    """A --limit run that is otherwise whole: every task of every play ran on each host it reached."""
    return bool(cliargs.get("subset")) and not cliargs.get("start_at_task") and not cliargs.get("step")


def limited_scopes(previous: Mapping[str, Any], readers: Mapping[str, Any]) -> list[str]:
    """What the site record of a --limit run writes instead of the site scope: every role whose probe ran on this
    host this run and that reads nothing beyond it. Each ran whole here (or held), and the reading is the run's
    last, so an entry per role with it is what the site record would say for that role, while a role that reads
    other hosts (slurm.conf lists the cluster) gets no entry (issue 26, hole 5)."""
    return [s for s in sorted(previous.get("probed") or []) if s in readers and not reads_cluster(s, readers)]


def inputs_digest(variables: Mapping[str, Any], exclude: list[str], ansible_version: str) -> str:
    payload = {"code": code_digest(), "ansible": ansible_version,
               "vars": select_inputs(variables, role_prefixes(), exclude, default_names())}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _holds(entry: Any, inputs: str, cluster: str, cluster_counts: bool, digest: str) -> bool:
    """The module's rule (host_footprint.holds): same inputs and state, the same cluster where the role reads it."""
    return (isinstance(entry, Mapping) and entry.get("inputs") == inputs and entry.get("footprint") == digest
            and (not cluster_counts or entry.get("cluster") == cluster))


def reuse(previous: Mapping[str, Any], scopes: list[str], inputs: str, cluster: str = "",
          cluster_counts: bool = True) -> dict[str, Any] | None:
    """The probe answered from the previous reading, when it said converged (every role before skipped, nothing ran
    since) or when it is site.yml's site-wide probe (no role has run yet); None to read the host again."""
    if not (previous.get("converged") or site_reading(previous)) or previous.get("failed") \
            or not previous.get("digest") or previous.get("blockers"):
        return None
    recorded = previous.get("recorded") or {}
    names = sorted(recorded) if "*" in scopes else scopes
    held = [s for s in names if _holds(recorded.get(s), inputs, cluster, cluster_counts, previous["digest"])]
    why = ("no record of a converge for " + ", ".join(scopes) if not site_reading(previous) or
           not any(s in recorded for s in names) else str(previous.get("reason") or "not converged"))
    return {
        "changed": False, "converged": bool(held), "digest": previous["digest"], "recorded": dict(recorded),
        "sections": dict(previous.get("sections") or {}), "blockers": [], "reread": False,
        "reason": f"as the last converge ({held[0]}) left it, read earlier this run" if held
        else f"{why} (read earlier this run)",
    }


def site_reading(previous: Mapping[str, Any]) -> bool:
    """Whether ``previous`` is the probe of site.yml's first play (tasks/site.yml): the next probe is the first role's
    on a host that was not converged, and nothing between the two changes the host (fact gathering only)."""
    return previous.get("footprint_state") == "probe" and (previous.get("scopes") or [""])[0] == "site"


def covers(recorded: Mapping[str, Any]) -> list[str]:
    """The roles the held site record was written after: a converged host skips them all (the drift report's
    components for a host site.yml left out of its plays)."""
    entry = recorded.get("site")
    return [str(r) for r in entry.get("roles") or []] if isinstance(entry, Mapping) else []


def already_recorded(previous: Mapping[str, Any], scopes: list[str], inputs: str,
                     cluster: str = "") -> dict[str, Any] | None:
    """A record with nothing to write: the reading this run still holds (converged) and the stamp has the scope."""
    held = reuse(previous, scopes, inputs, cluster, True)
    if held is None or not held["converged"]:
        return None
    held["reason"] = f"recorded ({scopes[0]}), unchanged"
    return held


def unrecorded(previous: Mapping[str, Any], scopes: list[str], inputs: str) -> dict[str, Any] | None:
    """The probe's answer without a module run when the stamp read this run has no entry for ``scopes`` with this
    run's inputs ("not converged" whatever the state); None when it may hold, or no stamp was read this run."""
    recorded = previous.get("recorded")
    if previous.get("failed") or not isinstance(recorded, Mapping):
        return None
    names = sorted(recorded) if "*" in scopes else scopes
    if any(isinstance(recorded.get(s), Mapping) and recorded[s].get("inputs") == inputs for s in names):
        return None
    return {"changed": False, "converged": False, "recorded": dict(recorded), "sections": {}, "blockers": [],
            "reread": False,
            "reason": "no record of a converge for " + ", ".join(scopes) + " with this run's inputs (stamp read "
                      "earlier this run)"}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        previous = args.pop("previous", None) or {}
        exclude = list(args.pop("inputs_exclude", None) or [])
        probe = boolean(args.pop("probe", True), strict=False)
        defer = boolean(args.pop("defer", False), strict=False)
        scopes = list(args.get("scopes") or [])
        # Which call and for which scopes, in the result: the break-and-restore callback reads the probes' answers.
        result.update(footprint_state=args.get("state", "probe"), scopes=scopes)
        if not isinstance(previous, Mapping):
            previous = {}
        inputs, cluster, readers = previous.get("inputs"), previous.get("cluster"), previous.get("cluster_readers")
        if not cluster or not isinstance(readers, Mapping):
            # The run's cluster digest where site.yml's first play computed it (tasks/site.yml), also after a task
            # that registered no reading (a record skipped in check mode): N hosts' variables read once per run.
            run = args.pop("run", None) or {}
            if isinstance(run, Mapping) and run.get("cluster") and isinstance(run.get("cluster_readers"), Mapping):
                cluster, readers = run["cluster"], run["cluster_readers"]
            else:
                readers = {k: sorted(v) for k, v in cluster_readers().items()}
                cluster = cluster_digest(task_vars, readers, exclude)
        args.pop("run", None)
        if args.get("state") == "cluster":
            # tasks/site.yml, run_once: the one value every host's probe carries from here.
            result.update(changed=False, cluster=cluster, cluster_readers=readers)
            return result
        if not inputs:
            host = task_vars.get("inventory_hostname", "")
            hostvars = task_vars.get("hostvars") or {}
            version = str((task_vars.get("ansible_version") or {}).get("full", ""))
            inputs = inputs_digest(hostvars.get(host, {}), exclude, version)
        counts = "*" in scopes or reads_cluster(scopes[0] if scopes else "site", readers)
        probed = {str(x) for x in previous.get("probed") or []}
        if args.get("state", "probe") == "probe" and scopes:
            probed.add(scopes[0])
        carried = {"inputs": inputs, "cluster": cluster, "cluster_readers": readers, "probed": sorted(probed)}
        if args.get("state", "probe") == "probe":
            if not probe:
                result.update(changed=False, converged=False, reason="probe off (host_footprint_probe)",
                              reread=False, **carried)
                return result
            reused = reuse(previous, scopes, inputs, cluster, counts) or unrecorded(previous, scopes, inputs)
            if reused is not None:
                result.update(reused, **carried)
                if scopes[0] == "site" and reused["converged"]:
                    result["covers"] = covers(reused["recorded"])
                return result
        else:
            cli = ansible.context.CLIARGS
            why = partial_run(cli, scopes[0] if scopes else "site", counts, previous, readers)
            limited = limited_scopes(previous, readers) if scopes == ["site"] and limit_only(cli) else []
            if why and limited:
                # A --limit run: the site scope would claim the cluster, the roles that read only this host are
                # recorded with the run's last reading, in the one write the site record would have been.
                args["scopes"] = scopes = limited
                counts = False
            elif why:
                # Not a change and not the record: the next run's probe finds no record for this state.
                result.update(changed=False, converged=False, reason=f"not recorded: {why}", reread=False, **carried)
                return result
            if not limited and (held := already_recorded(previous, scopes[:1], inputs, cluster)) is not None:
                result.update(held, **carried)
                return result
            if defer and (not partial_run(cli, "site", True, previous) or limit_only(cli)):
                # No reading: the role may have changed the host. The stamp read earlier this run is still the
                # stamp (nothing was written), so later probes keep answering from it.
                kept = previous.get("recorded")
                result.update(changed=False, converged=False, reread=False,
                              reason=f"left to the site record ({scopes[0] if scopes else 'site'})", **carried)
                if isinstance(kept, Mapping) and not previous.get("failed"):
                    result["recorded"] = dict(kept)
                return result
        args["inputs"] = inputs
        args["cluster"] = cluster
        args["cluster_counts"] = counts
        if args.get("state") == "record" and scopes == ["site"]:
            args["roles"] = sorted(probed - {"site"})
        reads = dict(args.get("reads") or {})
        reads["files"] = sorted({*(reads.get("files") or []), *relies_on()})
        args["reads"] = reads
        result.update(self._execute_module(module_name="host_footprint", module_args=args, task_vars=task_vars))
        result.update(carried)
        if args.get("state", "probe") == "probe" and scopes[:1] == ["site"] and result.get("converged"):
            result["covers"] = covers(result.get("recorded") or {})
        result.setdefault("reread", True)
        return result
