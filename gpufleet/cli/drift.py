"""``gpufleet drift`` and ``gpufleet remediate``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpufleet.ansible_run.job_events import read_job_events
from gpufleet.cli.contract import console_for, contract
from gpufleet.drift import (
    DEFAULT_TEXTFILE,
    EXIT_ERROR,
    build_report,
    parse_batch,
    plan_hosts,
    remediate,
    render_text,
    render_textfile,
    write_textfile,
)
from gpufleet.drift.report import merge_reports
from gpufleet.drift.runner import (
    SITE,
    AnsibleExecutor,
    Target,
    check_drift,
    collect_skew,
    dump,
    report_from_events,
    skew_lines,
    stack_health,
    target_for_stack,
)
from gpufleet.errors import InputError
from gpufleet.workflow import resolve_stack

console = console_for(stderr=True)

app = typer.Typer(no_args_is_help=True, add_completion=False)

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml) or path.")]
LimitOpt = Annotated[str | None, typer.Option("--limit", "-l", help="Ansible host pattern.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the machine-readable report on stdout.")]
InventoryOpt = Annotated[Path | None, typer.Option(
    help="Use this inventory instead of the stack's (Molecule, AWX); versions then come from its group_vars.")]
PlaybookOpt = Annotated[Path, typer.Option(help="Playbook whose check run defines the desired state.")]


def _target(stack: str, inventory: Path | None) -> Target:
    """The stack's (or the given inventory's) target; errors go through the CLI's error contract (exit 1)."""
    if inventory is not None:
        if not inventory.exists():
            raise InputError.one(str(inventory), "inventory not found", "pass an existing inventory file or "
                                 "directory", key="--inventory", kind="input error")
        return Target(inventory.resolve(), None, stack)
    try:
        return target_for_stack(resolve_stack(stack))
    except FileNotFoundError as e:
        raise InputError.one(str(stack), str(e), f"run `gpufleet up --stack {stack}` first (it writes the "
                             "inventory)", kind="missing inventory") from None


def drift_command(
    stack: StackOpt = "local",
    limit: LimitOpt = None,
    json_out: JsonOpt = False,
    textfile: Annotated[Path | None, typer.Option(
        help=f"Prometheus textfile to write (default {DEFAULT_TEXTFILE}, when its directory exists).")] = None,
    skew: Annotated[bool, typer.Option(help="Also collect versions and report skew within each pool.")] = False,
    inventory: InventoryOpt = None,
    playbook: PlaybookOpt = SITE,
    record: Annotated[Path | None, typer.Option(help="Save the check run's scrubbed events (JSON lines).")] = None,
    events: Annotated[list[Path] | None, typer.Option(
        help="Build the report from a check job that already ran (AWX/AAP job events, an ansible-runner artifacts "
             "folder, or --record's file) instead of running one; --stack then only labels the metrics. Repeat it "
             "for the parallel drift workflow's jobs (disjoint --limit ranges): one report of them all.")] = None,
) -> None:
    """Report what a converge would change, per host and component. Exit 0 in sync, 2 drifted, 1 error."""
    if events:
        clash = [o for o, v in (("--skew", skew), ("--limit", limit), ("--record", record),
                                ("--inventory", inventory)) if v]
        if clash:
            raise InputError.one("--events", f"{', '.join(clash)} cannot be used with --events: the job already ran",
                                 "drop them, or run the check here without --events", key="--events",
                                 value=str(events[0]), kind="invalid option")
        reports = [report_from_events(read_job_events(path))[0] for path in events]
        report = reports[0] if len(reports) == 1 else merge_reports(reports)
        target = Target(events[0], None, stack)
    else:
        target = _target(stack, inventory)
        report, _ = check_drift(target, limit=limit, playbook=playbook, console=console,
                                live=sys.stderr.isatty() and not json_out, record=record)
    path = textfile if textfile is not None else (DEFAULT_TEXTFILE if DEFAULT_TEXTFILE.parent.is_dir() else None)
    if path is not None:
        write_textfile(path, render_textfile(report, stack=target.stack))
    data = report.to_json() | {"stack": target.stack, "textfile": str(path) if path else None}
    if skew:
        versions, skew_run = collect_skew(target, limit=limit)
        data["versions"] = versions
        data["skew"] = skew_lines(versions, target.lock)
        if not skew_run.ok:
            data["errors"] = [*data["errors"], f"skew collection: {skew_run.verdict()}"]
    if json_out:
        print(dump(data))
    else:
        console.print(render_text(report), markup=False, highlight=False, soft_wrap=True)
        for s in data.get("skew", []):
            console.print(f"skew: {s['line']}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(report.exit_code)


def remediate_command(
    stack: StackOpt = "local",
    limit: LimitOpt = None,
    batch: Annotated[str, typer.Option(help="Hosts per batch: a count (5) or a share of the hosts (10%).")] = "10%",
    max_fail: Annotated[int, typer.Option(help="Stop after this many failed hosts (0: never stop).")] = 1,
    dry_run: Annotated[bool, typer.Option(help="Show the plan (drains, batches) and change nothing.")] = False,
    health_checks: Annotated[bool, typer.Option(
        "--health/--no-health", help="Also run `gpufleet validate`'s node health checks before resuming.")] = True,
    json_out: JsonOpt = False,
    inventory: InventoryOpt = None,
    playbook: PlaybookOpt = SITE,
) -> None:
    """Converge drifted hosts in rolling batches, draining only those whose change disrupts GPU work."""
    try:
        parse_batch(batch, 1)  # refuse a bad --batch before a check run of several minutes
    except ValueError as e:
        raise InputError.one("--batch", str(e), "pass a count (5) or a share of the hosts (10%, at most 100%)",
                             key="--batch", value=batch, kind="invalid option") from None
    target = _target(stack, inventory)
    report, _ = check_drift(target, limit=limit, playbook=playbook, console=console, live=sys.stderr.isatty())
    if report.errors:
        console.print(render_text(report, diffs=False), markup=False, highlight=False)
        if report.failed_hosts:
            console.print(f"[red]drift check failed on {', '.join(report.failed_hosts)}: fix those hosts "
                          "(or --limit them out) before remediating[/red]", highlight=False)
        raise typer.Exit(EXIT_ERROR)
    plans = plan_hosts(report)
    try:
        size = parse_batch(batch, len(report.hosts))
    except ValueError as e:
        raise InputError.one("--batch", str(e), "pass a count (5) or a share of the hosts (10%)",
                             key="--batch", value=batch, kind="invalid option") from None
    for p in plans:
        console.print(f"{p.host}: {'drain, ' if p.drain else 'in place, '}{', '.join(p.components)}",
                      markup=False, highlight=False)
    data: dict[str, object] = {"stack": target.stack, "drift": report.to_json(), "batch_size": size,
                               "plans": [{"host": p.host, "drain": p.drain, "components": list(p.components),
                                          "reason": p.reason} for p in plans]}
    if dry_run or not plans:
        console.print("nothing to remediate" if not plans else "dry run: nothing changed", highlight=False)
        if json_out:
            print(dump(data))
        raise typer.Exit(0)
    extravars = {"gpufleet_remediate_playbook": str(playbook.resolve())}
    # The node health checks need the stack (spec, lock, catalog); a bare --inventory gets the playbook's.
    health = stack_health(target.resolved) if target.resolved is not None and health_checks else None
    executor = AnsibleExecutor(target, console=console, live=sys.stderr.isatty(), extravars=extravars,
                               health=health)
    result = remediate(plans, batch_size=size, max_fail=max_fail, executor=executor,
                       log=lambda m: console.print(m, markup=False, highlight=False))
    if result.stopped:
        console.print(f"[yellow]{result.stopped}[/yellow]", highlight=False)
    data["remediation"] = result.to_json()
    if json_out:
        print(dump(data))
    raise typer.Exit(0 if result.ok else EXIT_ERROR)


drift_command = contract(drift_command)
remediate_command = contract(remediate_command)
app.command("drift")(drift_command)
app.command("remediate")(remediate_command)

__all__ = ["app", "build_report", "drift_command", "remediate_command"]

if __name__ == "__main__":
    app()
