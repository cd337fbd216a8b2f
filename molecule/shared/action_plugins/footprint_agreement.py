"""footprint_agreement: the probe's verdict on each generated perturbation of a converged node (issue 26 point 2).

Used by molecule/shared/agree.yml only (an action plugin next to the playbook). ``op``:
- ``probe_each``: for the roles with a probe that ``converge`` (a scenario's converge.yml) runs, generates the
  node's perturbations (testbed/footprint_perturb.py from the roles' files,
  testbed/footprint_perturb_host.py on the node), and for each one applies it, runs the host_footprint module
  with the arguments of the baseline reading (``baseline``: roles/host_footprint's read.yml result, converged)
  and undoes it, all in one call on the node. Then the group map: a host added to the groups the roles
  read, each role's probe asked with the cluster digest roles/host_footprint's action plugin computes for that
  map. Returns every verdict, and what was not tried and why (``not_tried``: a result's
  ``skipped`` is Ansible's task status).
- ``apply``: applies ``perturbations`` together and keeps them (the batch the full check runs on).
- ``restore``: undoes whatever is applied.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

#: molecule/shared/action_plugins/ -> the repository.
_REPO = Path(__file__).resolve().parents[3]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from testbed import footprint_perturb  # noqa: E402

_HOST = (_REPO / "testbed" / "footprint_perturb_host.py").read_text()
#: The host that the group perturbation adds (never contacted: the full check limits the play to real nodes).
EXTRA_HOST = "gpufleet-agree-extra"


def _footprint_plugin() -> Any:
    """roles/host_footprint's action plugin, for its cluster digest and which roles read the cluster."""
    path = _REPO / "roles" / "host_footprint" / "action_plugins" / "host_footprint.py"
    spec = importlib.util.spec_from_file_location("gpufleet_host_footprint_action", path)
    if spec is None or spec.loader is None:
        raise AnsibleActionFail(f"{path}: cannot load")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _node(self, op: str, payload: dict[str, Any]) -> dict[str, Any]:
        cmd = " ".join(shlex.quote(w) for w in ["python3", "-c", _HOST, op, json.dumps(payload)])
        res = self._low_level_execute_command(cmd, sudoable=True)
        if res.get("rc") != 0:
            raise AnsibleActionFail(f"footprint_perturb_host {op} failed (rc {res.get('rc')}): "
                                    f"{res.get('stderr', '')[-2000:]} {res.get('stdout', '')[-500:]}")
        # The last line: a become wrapper may print its own before it.
        lines = [ln for ln in str(res.get("stdout", "")).splitlines() if ln.startswith("{")]
        try:
            return dict(json.loads(lines[-1]))
        except (ValueError, IndexError) as e:
            raise AnsibleActionFail(f"footprint_perturb_host {op}: no JSON ({e}): "
                                    f"{res.get('stdout', '')[-500:]}") from e

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        op = args.get("op")
        # The node's "failed" lists are renamed: a result's "failed" is Ansible's task status.
        if op == "apply":
            done = self._node("apply", {"perturbations": args.get("perturbations") or []})
            result.update(changed=True, applied=done["applied"], not_applied=done["failed"],
                          not_restored=done["restore_failed"])
            return result
        if op == "restore":
            done = self._node("restore", {})
            result.update(changed=True, restored=done["restored"], not_restored=done["failed"])
            return result
        if op != "probe_each":
            raise AnsibleActionFail(f"op must be probe_each, apply or restore, not {op!r}")
        started = time.monotonic()
        repo_roles = _REPO / "roles"
        roles = footprint_perturb.converge_roles(Path(str(args["converge"])), repo_roles)
        baseline = args.get("baseline") or {}
        result.update(changed=False, roles=roles, perturbations=[], not_tried=[], left_out=[], group={})
        if not roles:
            result["not_tried"].append({"kind": "*", "why": "no role with a probe in this converge"})
            return result
        if not baseline.get("converged"):
            # The probe says "not converged" for every perturbation: agreement holds by its own answer.
            result["not_tried"].append({"kind": "*", "why": f"the probe does not hold here: {baseline.get('reason')}"})
            return result
        # The module's arguments as roles/host_footprint's plugin builds them for read.yml: the role's reads (its
        # vars, made public by agree.yml's include), every role's relies_on, the inputs and cluster the baseline
        # reading carries (a registered result has no invocation to copy them from).
        plugin = _footprint_plugin()
        reads = dict(args.get("reads") or {})
        if not reads.get("paths") or not baseline.get("inputs") or not baseline.get("cluster"):
            raise AnsibleActionFail("reads (host_footprint's __host_footprint_reads) and a baseline reading with "
                                    "inputs and cluster are needed")
        reads["files"] = sorted({*(reads.get("files") or []), *plugin.relies_on()})
        module_args: dict[str, Any] = {"state": "probe", "scopes": ["*"], "inputs": baseline["inputs"],
                                       "cluster": baseline["cluster"], "cluster_counts": True, "reads": reads}
        exclude = list(args.get("inputs_exclude") or [])
        # The group map: every role's own probe (its scope, site) with the cluster digest of a map with one more
        # host in the groups the roles read and the node's own groups (a role that reads none must not care).
        readers = {k: sorted(v) for k, v in plugin.cluster_readers().items()}
        groups = {g: list(h) for g, h in (task_vars.get("groups") or {}).items()}
        wanted = {"all", *[g for g in task_vars.get("group_names") or []]}
        for r in roles:
            for g in footprint_perturb.groups_read(repo_roles, r):
                # groups[slurm_compute_group]: the host's value of the variable (an inventory or default string).
                name = task_vars.get(g[2:-2].strip()) if g.startswith("{{") else g
                if isinstance(name, str) and "{" not in name:
                    wanted.add(name)
                else:
                    result["not_tried"].append({"kind": "group", "why": f"{r} reads groups[{g}], not a plain name"})
        for g in sorted(wanted):
            groups[g] = sorted({*groups.get(g, []), EXTRA_HOST})
        # The real hosts' variables as the footprint plugin reads them; the added host has none.
        hostvars = task_vars.get("hostvars") or {}
        real = {h: hostvars[h] for h in (task_vars.get("groups") or {}).get("all") or []}
        cluster = plugin.cluster_digest({**task_vars, "groups": groups, "hostvars": real}, readers, exclude)
        result["group_map"] = {"host": EXTRA_HOST, "groups": sorted(wanted)}
        # Each role's probe on the grown map answers from the baseline reading, as the probe of a later role in a
        # run does (roles/host_footprint's reuse, its own rule): the host state is the baseline's, only the cluster
        # digest moved, and a module run costs seconds of the node's time.
        for r in roles:
            ans = plugin.reuse(baseline, [r, "site"], baseline["inputs"], cluster, plugin.reads_cluster(r, readers))
            result["group"][r] = {"converged": bool(ans and ans["converged"]),
                                  "reason": str(ans["reason"]) if ans else "no reading to answer from"}
            # Not held, but held without the cluster: the grown map is what the probe saw.
            if ans and not ans["converged"] and (plugin.reuse(baseline, [r, "site"], baseline["inputs"], cluster,
                                                              False) or {}).get("converged"):
                result["group"][r]["reason"] = "cluster changed since the last converge (the grown group map)"
        probe_args = {"state": module_args}
        # Each probe is the module as _execute_module would build it (AnsiballZ, its arguments inside), sent once;
        # the node runs the whole sequence in one process (testbed/footprint_perturb_host.py probe_each): a call
        # through the connection per perturbation cost seconds each.
        tmp = self._make_tmp_path()
        try:
            remote: dict[str, str] = {}
            for name, margs in probe_args.items():
                margs = dict(margs)
                self._update_module_args("host_footprint", margs, task_vars)
                # ActionBase's own builder by name: the Mitogen strategy's action mixin replaces _configure_module
                # with one that refuses to be called (it ships modules its own way), and this file is run by a
                # process on the node, not by Mitogen.
                bits, _path = ActionBase._configure_module(self, module_name="host_footprint", module_args=margs,
                                                           task_vars=task_vars)
                path = self._connection._shell.join_path(tmp, f"probe{len(remote)}.py")
                self._transfer_data(path, bits.b_module_data)
                remote[name] = path
            self._fixup_perms2([tmp, *remote.values()])
            cands = [c for r in roles for c in footprint_perturb.candidates(repo_roles, r)]
            done = self._node("probe_each", {"candidates": cands, "limit": int(args.get("limit", 24)),
                                             "probes": remote})
        finally:
            self._remove_tmp_path(tmp)
        if done.get("failed"):
            raise AnsibleActionFail(str(done.get("msg")))
        result.update(perturbations=done["perturbations"], not_tried=result["not_tried"] + done["skipped"],
                      left_out=done["left_out"], not_restored=done["not_restored"],
                      converged_after=done["converged_after"], reason_after=done["reason_after"])
        result["seconds"] = round(time.monotonic() - started, 1)
        return result
