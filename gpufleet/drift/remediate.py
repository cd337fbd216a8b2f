"""Rolling remediation: which hosts need a drain, in which batches, and when to stop.

The planner is pure (it works on a ``DriftReport``); the side effects go through an ``Executor`` so the
rolling logic is tested without hosts, and ``gpufleet.drift.runner.AnsibleExecutor`` does them for real.

Rules: a host whose pending change is disruptive (driver, fabric manager, kernel module reload) is drained
first, converged, post-checked and resumed only when the checks pass; a host with settings-only drift is
converged in place. A host that fails stays out of service with the reason. Never more than one batch of
hosts is out of service: hosts kept drained after a failure use up room in the following batches. The run
stops once ``max_fail`` hosts have failed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.drift.report import DriftReport

_BATCH = re.compile(r"^\s*(?P<n>[0-9]+(?:\.[0-9]+)?)\s*(?P<pct>%?)\s*$")


@dataclass(frozen=True)
class HostPlan:
    host: str
    components: tuple[str, ...]
    drain: bool

    @property
    def reason(self) -> str:
        return f"gpufleet: remediate {','.join(self.components)}"


@dataclass
class HostOutcome:
    host: str
    drained: bool
    ok: bool
    resumed: bool = False
    message: str = ""
    #: What the converge reported for the summary (``RunResult.notices``: a recovered interrupted dpkg run).
    notices: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "drained": self.drained, "ok": self.ok, "resumed": self.resumed,
                "message": self.message, "notices": list(self.notices)}


class Executor(Protocol):
    def apply(self, batch: Sequence[HostPlan]) -> dict[str, HostOutcome]:
        """Drain the plans marked ``drain``, converge all, post-check, resume drained hosts that pass."""

    def hold(self, host: str, reason: str) -> None:
        """Keep (or put) a failed host out of service with ``reason``."""


@dataclass
class RemediationResult:
    batches: list[list[str]] = field(default_factory=list)
    outcomes: dict[str, HostOutcome] = field(default_factory=dict)
    #: Drifted hosts not attempted because the run stopped.
    skipped: list[str] = field(default_factory=list)
    stopped: str = ""

    @property
    def failed(self) -> list[str]:
        return [h for h, o in self.outcomes.items() if not o.ok]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.skipped

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "batches": self.batches, "outcomes": [o.to_json() for o in self.outcomes.values()],
                "failed": self.failed, "skipped": self.skipped, "stopped": self.stopped}


def parse_batch(spec: str | int, total: int) -> int:
    """Hosts per batch: ``"10%"`` of ``total`` (rounded up, at least 1) or a count (``"3"``)."""
    m = _BATCH.match(str(spec))
    if not m or float(m.group("n")) <= 0:
        raise ValueError(f"--batch {spec!r}: give a host count (5) or a percentage of the hosts (10%)")
    n = float(m.group("n"))
    if m.group("pct") and n > 100:
        raise ValueError(f"--batch {spec!r}: a share of the hosts is at most 100%")
    if m.group("pct"):
        return max(1, math.ceil(total * n / 100.0))
    if not n.is_integer():
        raise ValueError(f"--batch {spec!r}: a host count must be a whole number")
    return int(n)


def plan_hosts(report: DriftReport) -> list[HostPlan]:
    """One plan per drifted host, in inventory order."""
    plans = []
    for host in report.hosts:
        items = report.for_host(host)
        if items:
            comps = tuple(dict.fromkeys(i.component for i in items))
            plans.append(HostPlan(host, comps, report.needs_drain(host)))
    return plans


def _next_batch(pending: list[HostPlan], size: int, held: int) -> list[HostPlan]:
    """Up to ``size`` hosts, of which at most ``size - held`` are drained (held hosts are out already)."""
    room = size - held
    batch: list[HostPlan] = []
    for plan in list(pending):
        if len(batch) >= size:
            break
        if plan.drain:
            if room <= 0:
                continue
            room -= 1
        batch.append(plan)
        pending.remove(plan)
    return batch


def remediate(plans: Sequence[HostPlan], *, batch_size: int, max_fail: int, executor: Executor,
              log: Callable[[str], None] = lambda _msg: None) -> RemediationResult:
    result = RemediationResult()
    pending = list(plans)
    held = 0
    while pending:
        batch = _next_batch(pending, batch_size, held)
        if not batch:
            result.stopped = (f"{held} failed host(s) stay drained, which fills the batch of {batch_size}: "
                              "no more hosts can be taken out of service")
            break
        names = [p.host for p in batch]
        result.batches.append(names)
        log(f"batch {len(result.batches)}: " + ", ".join(f"{p.host} ({'drain' if p.drain else 'in place'})"
                                                         for p in batch))
        outcomes = executor.apply(batch)
        for plan in batch:
            out = outcomes.get(plan.host) or HostOutcome(plan.host, plan.drain, False, message="no result")
            result.outcomes[plan.host] = out
            for line in out.notices:
                log(line)
            if not out.ok:
                reason = f"gpufleet: remediate failed: {out.message}"[:200]
                executor.hold(plan.host, reason)
                held += 1
                log(f"{plan.host}: failed, kept out of service: {out.message}")
            else:
                log(f"{plan.host}: ok" + (", resumed" if out.resumed else ""))
        if len(result.failed) >= max_fail > 0:
            result.stopped = f"stopped after {len(result.failed)} failure(s) (--max-fail {max_fail})"
            break
    result.skipped = [p.host for p in pending]
    return result
