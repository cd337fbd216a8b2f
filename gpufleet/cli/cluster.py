"""``gpufleet up | down | status | converge``."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.table import Table

from gpufleet.cli.contract import console_for, contract, print_json
from gpufleet.errors import InputError
from gpufleet.workflow import ResolvedStack, resolve_stack, sandbox_report
from gpufleet.workflow import converge as run_converge

# Pipes and CI logs get a wide plain console, so tables are not squeezed to 80 columns.
console = console_for(stderr=True)

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml) or path.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable JSON summary on stdout.")]


def _resolve(stack: str, *, up: bool = False, gpu_nodes: int | None = None) -> ResolvedStack:
    # A ConfigError goes through the CLI's error contract (gpufleet.cli.contract): exit 1, JSON with --json.
    return resolve_stack(stack, up=up, gpu_nodes=gpu_nodes)


def up(stack: StackOpt = "local", json_out: JsonOpt = False,
       gpu_nodes: Annotated[int | None, typer.Option(
           help="Sandbox only: GPU nodes to run (1 up to what this machine holds), instead of the stack's count.")]
       = None) -> None:
    """Create or update the cluster, converge it, validate it and print a report."""
    t0 = time.monotonic()
    resolved = _resolve(stack, up=True, gpu_nodes=gpu_nodes)
    spec, lock = resolved.spec, resolved.lock
    if spec.backend != "local":
        from gpufleet.infra.automation import PulumiCliMissing
        from gpufleet.infra.automation import up as pulumi_up

        try:
            pulumi_up(resolved)
        except PulumiCliMissing as e:
            message, _, fix = str(e).partition(": ")
            raise InputError.one("pulumi", message, fix, kind="missing tool") from None
        result = run_converge(resolved, console=console)
        if json_out:
            print_json({"stack": spec.stack, "converge": result.to_json()})
        raise typer.Exit(0 if result.ok else 1)

    from gpufleet.sandbox import cluster, platform

    console.print(f"[bold]gpufleet up[/bold] stack [cyan]{spec.stack}[/cyan] (local sandbox), lock "
                  f"[cyan]{lock.profile}[/cyan]: driver {lock.driver}")
    plat = platform.prepare(log=True)
    states = cluster.up(spec, plat.image)
    console.print(f"nodes: {', '.join(s.node.hostname for s in states)}")
    result = run_converge(resolved, console=console)
    reports = sandbox_report(resolved)
    _print_nodes(reports)
    elapsed = time.monotonic() - t0
    changed = sum(h.changed for h in result.hosts.values())
    healthy = all(not r.problems for r in reports)
    console.print(f"{'[green]ready[/green]' if result.ok and healthy else '[red]not ready[/red]'}: "
                  f"{changed} changed tasks, {elapsed:.0f}s. Inventory: inventories/{spec.stack}/hosts.yml")
    if json_out:
        print_json({"stack": spec.stack, "elapsed_s": round(elapsed, 1), "changed": changed,
                    "converge": result.to_json(), "nodes": [r.to_json() for r in reports]})
    raise typer.Exit(0 if result.ok and healthy else 1)


def _print_nodes(reports: list) -> None:  # type: ignore[type-arg]
    table = Table(title="sandbox nodes")
    for col in ("host", "pool", "state", "GPUs", "driver", "persistence", "power limit (W)", "problems"):
        table.add_column(col)
    for r in reports:
        pm = "-" if not r.persistence else ("on" if all(r.persistence) else "partly off")
        pl = "-" if not r.power_limits_w else ",".join(sorted({f"{w:g}" for w in r.power_limits_w if w}))
        table.add_row(r.host, r.pool, "running" if r.running else "stopped", str(r.gpus or "-"),
                      r.driver or "-", pm, pl, "; ".join(r.problems) or "ok")
    console.print(table)


def down(stack: StackOpt = "local") -> None:
    """Remove the sandbox's containers (local stack) and stop the Docker daemon if gpufleet started it."""
    from gpufleet.sandbox import cluster, engine
    from gpufleet.spec import load_spec

    spec = load_spec(stack)
    if spec.backend != "local":
        raise InputError.one(str(stack), "down is for the local sandbox",
                             f"for other stacks run `pulumi destroy --stack {spec.stack}`",
                             key="gpufleet:backend", value=spec.backend, kind="wrong stack")
    removed = cluster.down(spec.stack) if engine.daemon_answers() else []
    stopped = engine.stop_engine()
    console.print(f"removed {len(removed)} containers" + ("; stopped dockerd" if stopped else ""))


def status(stack: StackOpt = "local", json_out: JsonOpt = False) -> None:
    """Show the sandbox nodes and what their GPUs report."""
    reports = sandbox_report(_resolve(stack))
    if json_out:
        print_json([r.to_json() for r in reports])
    else:
        _print_nodes(reports)
    raise typer.Exit(0 if all(not r.problems for r in reports) else 1)


def converge(stack: StackOpt = "local",
             limit: Annotated[str | None, typer.Option(help="Ansible host pattern.")] = None,
             check: Annotated[bool, typer.Option(help="Check mode: report, change nothing.")] = False,
             diff: Annotated[bool, typer.Option(help="Show diffs.")] = False,
             json_out: JsonOpt = False) -> None:
    """Run ansible/site.yml against the stack's inventory with live per-host progress."""
    result = run_converge(_resolve(stack), limit=limit, check=check, diff=diff, console=console)
    if json_out:
        print_json(result.to_json())
    raise typer.Exit(0 if result.ok else 1)


def register(app: typer.Typer) -> None:
    for command in (up, down, status, converge):
        app.command()(contract(command))
