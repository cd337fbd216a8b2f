"""The ``gpufleet`` command line."""

from __future__ import annotations

import typer

from gpufleet.cli import cluster
from gpufleet.cli import drift as drift_cmd
from gpufleet.cli import inspect as inspect_cmd
from gpufleet.cli import lock as lock_cmd
from gpufleet.cli import plan as plan_cmd
from gpufleet.cli import validate as validate_cmd

app = typer.Typer(
    name="gpufleet",
    help="Infrastructure-as-code for ML GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
)
cluster.register(app)
app.add_typer(lock_cmd.app, name="lock", help="Show and check the stack's version lock.")
app.add_typer(inspect_cmd.app, name="inspect",
              help="Parse real tool output offline (nvidia-smi XML, topo -m, nvlink -s, nccl-tests).")
app.registered_commands.extend(plan_cmd.app.registered_commands)
app.command("drift")(drift_cmd.drift_command)
app.command("remediate")(drift_cmd.remediate_command)
app.command("validate")(validate_cmd.validate_command)
app.add_typer(validate_cmd.app, name="bench", help="Acceptance benchmarks: render job templates, gate results.")


def main() -> None:
    app()
