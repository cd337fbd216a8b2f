"""Running the drift check, the skew collection and remediation batches against a stack's inventory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import RunResult, run_playbook
from gpufleet.ansible_run.events import build_result
from gpufleet.ansible_run.job_events import JobEvents
from gpufleet.ansible_run.recording import scrub_events, write_events
from gpufleet.drift.remediate import HostOutcome, HostPlan
from gpufleet.drift.report import DriftReport, RawResults, build_report
from gpufleet.drift.skew import collect_versions, find_skew
from gpufleet.errors import InputError
from gpufleet.lock import Lock

if TYPE_CHECKING:
    from gpufleet.workflow import ResolvedStack

PLAYBOOKS = REPO_ROOT / "ansible" / "playbooks"
SITE = REPO_ROOT / "ansible" / "site.yml"
SKEW = PLAYBOOKS / "skew.yml"
REMEDIATE = PLAYBOOKS / "remediate.yml"
#: ansible's task_timeout for the check run: check mode only reads (dpkg, files, units, nvidia-smi), so a task
#: still running after this long is a host that stopped answering (ansible.cfg's 1800 s is for installs).
#: ANSIBLE_TASK_TIMEOUT in the environment wins.
CHECK_TASK_TIMEOUT = 300
#: The post-check task names remediate.yml gives; a failure there means "converged but not healthy".
POSTCHECK_PREFIX = "Post-check"


@dataclass
class Target:
    """Where a run goes: an inventory plus its lock (the lock names pinned versions for skew)."""

    inventory: Path
    lock: Lock | None = None
    stack: str = ""
    #: The stack the command resolved, when it runs against one (not a bare --inventory).
    resolved: ResolvedStack | None = None


def target_for_stack(stack: ResolvedStack) -> Target:
    return Target(stack.inventory, stack.lock, stack.name, stack)


def check_drift(target: Target, *, limit: str | None = None, console: Console | None = None,
                live: bool = False, playbook: Path = SITE,
                extravars: Mapping[str, Any] | None = None,
                record: Path | None = None, tags: list[str] | None = None) -> tuple[DriftReport, RunResult]:
    """site.yml in check + diff mode; the report of what it would change.

    ``record`` saves the run's events, scrubbed (``gpufleet.ansible_run.recording``), with a ``.meta.json``
    beside them: test fixtures and bug reports replay them through ``build_result`` and ``build_report``.
    """
    raw = RawResults()
    events: list[dict[str, Any]] = []

    def sink(event: Mapping[str, Any]) -> None:
        raw(event)
        if record is not None:
            events.append(dict(event))

    timeout = os.environ.get("ANSIBLE_TASK_TIMEOUT", str(CHECK_TASK_TIMEOUT)).strip()
    # Ansible would fail on it later without naming the variable; seconds, ASCII digits, bounded.
    if not (timeout.isascii() and timeout.isdigit() and len(timeout) <= 6):
        raise InputError.one("ANSIBLE_TASK_TIMEOUT", "not a number of seconds (0 to 999999)",
                             "set ANSIBLE_TASK_TIMEOUT to whole seconds such as 300, or unset it",
                             key="ANSIBLE_TASK_TIMEOUT", value=timeout[:40], kind="invalid environment")
    result = run_playbook(playbook, target.inventory, limit=limit, check=True, diff=True, console=console,
                          live=live, on_event=sink, extravars=dict(extravars or {}), tags=tags,
                          envvars={"ANSIBLE_TASK_TIMEOUT": timeout})
    if record is not None:
        replace = {str(REPO_ROOT): "{project}", str(target.inventory.parent): "{inventory_dir}"}
        write_events(record, scrub_events(events, replace))
        record.with_suffix(".meta.json").write_text(
            json.dumps({"rc": result.rc, "status": result.status, "check": True}, indent=2) + "\n")
    if limit and (groups := unmatched_limit(result, target.inventory)) is not None:
        listed = f"its groups are {', '.join(groups)}" if groups else "it has no groups"
        raise InputError.one(str(target.inventory), f"--limit {limit!r} matched no host ({listed})",
                             "give a host or group name of the inventory, or a pattern such as 'gpu-*'",
                             key="--limit", value=limit, kind="invalid option")
    return build_report(result, raw), result


def report_from_events(job: JobEvents) -> tuple[DriftReport, RunResult]:
    """The drift report of a check run that ran elsewhere (AWX/AAP, ansible-runner), from its events.

    The same fold as a live check (``RawResults`` keeps the changed results' full ``res``, ``build_report`` reads
    them), so an AWX scheduled drift job and ``gpufleet drift`` give the same report on the same state.
    """
    if job.check is False:
        raise InputError.one(str(job.source), "the job ran without --check: it applied its changes, so its events "
                             "are a converge, not a drift check", "run the drift job template (check mode) and pass "
                             "its events", key="--events", kind="input error")
    raw = RawResults()
    for event in job.events:
        raw(event)
    result = build_result(job.events, rc=job.rc, status=job.status, check=True)
    return build_report(result, raw), result


#: What ansible-playbook logs when --limit leaves no host (the warning names the pattern, the error the outcome).
_NO_HOSTS = ("Could not match supplied host pattern", "leaves us with no hosts to target")


def inventory_groups(inventory: Path) -> list[str]:
    """The inventory's groups as ansible resolves them (any inventory source: file, directory, plugin)."""
    exe = Path(sys.executable).parent / "ansible-inventory"
    try:
        out = subprocess.run([str(exe), "-i", str(inventory), "--list"], capture_output=True, text=True,
                             check=True, timeout=120).stdout
        data = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return []
    return sorted(g for g, v in data.items()
                  if g not in ("_meta", "all") and isinstance(v, dict) and (v.get("hosts") or v.get("children")))


def unmatched_limit(result: RunResult, inventory: Path) -> list[str] | None:
    """The inventory's groups when ansible said that ``--limit`` matched no host; None otherwise."""
    if result.hosts or result.tasks or not any(m in line for line in result.log_tail for m in _NO_HOSTS):
        return None
    return inventory_groups(inventory)


#: The tasks that decide what apt trusts (repository sources and keys): every role includes nvidia_repo with
#: this tag, so a check limited to it is short enough for ``gpufleet validate`` to run on every call.
SECURITY_TAGS = ["repo"]


def check_security(target: Target, *, limit: str | None = None, console: Console | None = None,
                   live: bool = False) -> DriftReport:
    """The drift check limited to apt's sources and keys (``SECURITY_TAGS``); its ``security_items`` matter."""
    report, _ = check_drift(target, limit=limit, console=console, live=live, tags=SECURITY_TAGS)
    return report


def collect_skew(target: Target, *, limit: str | None = None) -> tuple[dict[str, dict[str, str]], RunResult]:
    result = run_playbook(SKEW, target.inventory, limit=limit, live=False)
    return collect_versions(result), result


def skew_lines(versions: Mapping[str, Mapping[str, str]], lock: Lock | None) -> list[dict[str, Any]]:
    return [s.to_json() | {"line": s.line()} for s in find_skew(versions, lock)]


def _first_failure(result: RunResult, host: str) -> str:
    """``task: reason``; for a failed command its output says more than "non-zero return code"."""
    for t in result.failures:
        if t.host == host and t.lost:
            return f"{t.task}: {t.reason}"
        if t.host == host:
            out = " ".join(str(t.res.get(k) or "").strip() for k in ("stderr", "stdout")).strip()
            msg = (t.msg or t.status).strip()
            if out and (not msg or msg == "non-zero return code"):
                msg = out
            return f"{t.task}: {msg.splitlines()[0] if msg else t.status}"
    return "failed"


#: host list -> {host: None when healthy, else the reason it is not}; hosts missing from the answer pass.
HealthCheck = Callable[[list[str]], dict[str, str | None]]


def stack_health(stack: ResolvedStack) -> HealthCheck:
    """The validation engineer's node health checks (``gpufleet validate``) as a post-check for a stack."""

    def check(hosts: list[str]) -> dict[str, str | None]:
        from gpufleet.validation.run import run_validation

        result = run_validation(stack, limit=",".join(hosts), live=False)
        return {n.host: None if n.status != "critical" else (n.drain_reason or f"health: {n.status}")
                for n in result.nodes}

    return check


class AnsibleExecutor:
    """Runs remediate.yml once per batch (drain, converge, post-check, resume) and once per failed host.

    With a ``health`` check the batch run stops before resuming; hosts that pass the health checks too
    are resumed by a second, ``resume``-tagged run.
    """

    def __init__(self, target: Target, console: Console | None = None, live: bool = False,
                 extravars: Mapping[str, Any] | None = None, health: HealthCheck | None = None) -> None:
        self.target = target
        self.console = console
        self.live = live
        self.extravars = dict(extravars or {})
        self.health = health
        self.runs: list[RunResult] = []

    def _run(self, limit: str, extravars: Mapping[str, Any], tags: list[str] | None = None) -> RunResult:
        result = run_playbook(REMEDIATE, self.target.inventory, limit=limit, tags=tags,
                              extravars=self.extravars | dict(extravars), console=self.console, live=self.live)
        self.runs.append(result)
        return result

    def apply(self, batch: Sequence[HostPlan]) -> dict[str, HostOutcome]:
        drain = [p.host for p in batch if p.drain]
        result = self._run(",".join(p.host for p in batch), {
            "gpufleet_remediate_drain": drain,
            "gpufleet_remediate_reasons": {p.host: p.reason for p in batch},
            "gpufleet_remediate_resume": self.health is None,
        })
        failed = {h: _first_failure(result, h) for h in set(result.failed_hosts) | set(result.unreachable_hosts)}
        if result.rc != 0 and not failed and not result.finished:
            failed = {p.host: f"remediate.yml did not finish ({result.status})" for p in batch}
        if self.health is not None:
            passed = [p.host for p in batch if p.host not in failed]
            verdicts = self.health(passed) if passed else {}
            failed |= {h: f"health: {why}" for h, why in verdicts.items() if why is not None and h in passed}
            resume = [h for h in drain if h not in failed]
            if resume:
                run = self._run(",".join(resume), {"gpufleet_remediate_drain": resume}, tags=["resume"])
                failed |= {h: _first_failure(run, h) for h in set(run.failed_hosts) | set(run.unreachable_hosts)}
        return {p.host: HostOutcome(p.host, drained=p.drain, ok=p.host not in failed,
                                    resumed=p.drain and p.host not in failed, message=failed.get(p.host, ""),
                                    notices=[n.line for n in result.notices if n.host == p.host])
                for p in batch}

    def hold(self, host: str, reason: str) -> None:
        self._run(host, {"gpufleet_remediate_hold_reason": reason}, tags=["hold"])


def dump(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str, allow_nan=False)
