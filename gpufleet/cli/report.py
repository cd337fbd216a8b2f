"""``gpufleet report --events``: the closing summary of a playbook job that ran elsewhere (AWX/AAP, ansible-runner)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.ansible_run import build_result, print_summary
from gpufleet.ansible_run.job_events import read_job_events
from gpufleet.cli.contract import EXIT_ERROR, console_for, contract, print_json

console = console_for()


def report_command(
    events: Annotated[Path, typer.Option(
        help="The job's events: an AWX/AAP job_events listing, an ansible-runner artifacts folder, or JSON lines.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Per-host recap, failures and verdict of a finished job, as `gpufleet converge` prints them; exit 1 if failed."""
    job = read_job_events(events)
    result = build_result(job.events, rc=job.rc, status=job.status, check=bool(job.check))
    if json_out:
        print_json({"events": str(events), "check": job.check, "run": result.to_json()})
    else:
        print_summary(result, console)
    raise typer.Exit(0 if result.ok else EXIT_ERROR)


def register(app: typer.Typer) -> None:
    app.command("report")(contract(report_command))
