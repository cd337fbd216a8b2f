"""``gpufleet audit``: read GPU hosts gpufleet did not build, judge them, propose the stack that would manage them.

Read-only on the hosts (ansible/playbooks/audit.yml); locally it writes only what it is asked to (``--report``,
``--write-stack``). Exit 0 without findings, 2 with findings (like ``gpufleet drift``), 1 on an error or when a host
could not be audited.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpufleet.audit.collect import Collected, read_facts_dir, run_audit, save_raw
from gpufleet.audit.facts import HostFacts, build_facts
from gpufleet.audit.findings import Finding, find_all
from gpufleet.audit.pools import pool_of
from gpufleet.audit.propose import propose
from gpufleet.cli.contract import EXIT_DRIFT, EXIT_ERROR, console_for, contract, dumps
from gpufleet.errors import InputError
from gpufleet.outdir import claim
from gpufleet.spec import STACK_NAME, stack_file, stack_name

console = console_for(stderr=True)

StackOpt = Annotated[str | None, typer.Option("--stack", "-s", help="Audit a stack's hosts (its inventory).")]
InventoryOpt = Annotated[Path | None, typer.Option("--inventory", "-i", help="Audit the hosts of this inventory.")]


def _collect(stack: str | None, inventory: Path | None, facts: Path | None, limit: str | None,
             live: bool) -> Collected:
    given = [o for o, v in (("--stack", stack), ("-i/--inventory", inventory), ("--facts", facts)) if v]
    if len(given) != 1:
        raise InputError.one("-", f"{' and '.join(given) if given else 'none'} given: pass exactly one of --stack, "
                             "-i/--inventory or --facts", "name the hosts to audit once", key="--stack",
                             kind="invalid option")
    if facts is not None:
        return read_facts_dir(facts)
    if inventory is not None:
        if not inventory.exists():
            raise InputError.one(str(inventory), "inventory not found", "pass an existing inventory file or folder",
                                 key="--inventory", kind="input error")
        return run_audit(inventory, limit=limit, hosts="all", live=live, console=console)
    from gpufleet.drift.runner import target_for_stack
    from gpufleet.workflow import resolve_stack

    assert stack is not None
    try:
        target = target_for_stack(resolve_stack(stack))
    except FileNotFoundError as e:
        raise InputError.one(stack, str(e), f"run `gpufleet up --stack {stack}` first (it writes the inventory), "
                             "or pass the hosts' inventory with -i", kind="missing inventory") from None
    return run_audit(target.inventory, limit=limit, hosts="gpu", live=live, console=console)


def _table(facts: list[HostFacts], failed: dict[str, str], findings: list[Finding]) -> Table:
    table = Table(title="gpufleet audit")
    for col in ("host", "pool", "GPUs", "driver", "CUDA", "findings"):
        table.add_column(col)
    for f in facts:
        mine = [x for x in findings if f.host in x.hosts]
        worst = sorted({x.severity for x in mine})
        table.add_row(f.host, pool_of(f), f"{f.gpu_count} x {f.gpu_name}" if f.gpu_count else "-",
                      f.versions().get("driver", "-"), f.versions().get("cuda", "-"),
                      f"{len(mine)} ({', '.join(worst)})" if mine else "0")
    for host, why in sorted(failed.items()):
        table.add_row(host, "-", "-", "-", "-", f"not audited: {why}")
    return table


def audit_command(
    stack: StackOpt = None,
    inventory: InventoryOpt = None,
    facts: Annotated[Path | None, typer.Option(
        help="Audit saved raw outputs instead of hosts: a folder of <host>/<read>.txt (a --report folder's raw/).")]
        = None,
    limit: Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the machine-readable report on stdout.")] = False,
    report: Annotated[Path | None, typer.Option(
        help="Write audit.json, the raw outputs (raw/<host>/) and the proposed stack into this folder.")] = None,
    write_stack: Annotated[str | None, typer.Option(
        help="Write the proposed stack as stacks/Pulumi.<NAME>.yaml (or to this .yaml path); never overwrites.")]
        = None,
) -> None:
    """Read-only audit of GPU hosts: facts, findings with fixes, and a proposed stack. Exit 0 clean, 2 findings,
    1 error or a host not audited."""
    collected = _collect(stack, inventory, facts, limit, live=sys.stderr.isatty() and not json_out)
    all_facts = []
    for host, raw in sorted(collected.raw.items()):
        f = build_facts(host, raw, pool=collected.pools.get(host))
        all_facts.append(f)
        if not json_out:
            console.print(f"{host}: audited" + (f" ({'; '.join(f.problems)})" if f.problems else ""),
                          markup=False, highlight=False, soft_wrap=True)
    for host, why in sorted(collected.failed.items()):
        console.print(f"{host}: not audited: {why}", markup=False, highlight=False, soft_wrap=True)
    findings = find_all(all_facts)
    name = "audited"
    if write_stack is not None:
        path = stack_file(write_stack)
        name = stack_name(path)
        if STACK_NAME.fullmatch(name) is None:
            raise InputError.one(str(path), f"the stack name {name!r} (from Pulumi.<name>.yaml) is not a DNS-1123 "
                                 "label", "pass a name of lower-case letters, digits and '-'", key="--write-stack",
                                 value=write_stack, kind="invalid option")
    proposal = propose(all_facts, name)
    data: dict[str, Any] = {
        "hosts": [f.to_json() for f in all_facts],
        "failed_hosts": collected.failed,
        "findings": [x.to_json() for x in findings],
        "proposed_stack": {"profile": proposal.profile.name if proposal.pools else None, "changes": proposal.changes,
                           "pools": [{"name": p.name, "gpu": p.gpu, "hosts": [h.host for h in p.hosts]}
                                     for p in proposal.pools],
                           "left_out": proposal.left_out, "written": None},
    }
    if write_stack is not None:
        if path.exists():
            raise InputError.one(str(path), "exists; the audit never overwrites a stack",
                                 "pass another --write-stack name, or move the file away", key="--write-stack",
                                 kind="output problem")
        if not proposal.pools:
            raise InputError.one(str(path), "no audited host has a GPU of gpufleet's catalog: nothing to propose",
                                 "see the report's left_out", key="--write-stack", kind="output problem")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(proposal.render(), encoding="utf-8")
        data["proposed_stack"]["written"] = str(path)
    if report is not None:
        out = claim(report, "--report")
        save_raw(collected, out.write_text)
        out.write_text("audit.json", dumps(data) + "\n")
        if proposal.pools:
            out.write_text("Pulumi.proposed.yaml", proposal.render())
    if json_out:
        print(dumps(data))
    else:
        console_for().print(_table(all_facts, collected.failed, findings))
        for x in findings:
            console.print(f"[{x.severity}] {x.id} {', '.join(x.hosts)}: {x.message}\n    fix: {x.fix}",
                          markup=False, highlight=False, soft_wrap=True)
        if not proposal.pools:
            console.print("proposed stack: none (no audited host has a GPU of gpufleet's catalog)",
                          markup=False, highlight=False)
        else:
            console.print(f"proposed stack: profile {proposal.profile.name}"
                          + (f", changes: {'; '.join(proposal.changes)}" if proposal.changes else
                             ", no version change")
                          + (f"; written to {data['proposed_stack']['written']}" if write_stack else
                             " (not written; --write-stack NAME writes it)"), markup=False, highlight=False,
                          soft_wrap=True)
    if collected.failed:
        raise typer.Exit(EXIT_ERROR)
    raise typer.Exit(EXIT_DRIFT if findings else 0)


audit_command = contract(audit_command)
__all__ = ["audit_command"]
