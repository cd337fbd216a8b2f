"""The ``gpufleet`` command line."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from gpufleet.cli import audit as audit_cmd
from gpufleet.cli import bench as bench_cmd
from gpufleet.cli import cluster
from gpufleet.cli import drift as drift_cmd
from gpufleet.cli import inspect as inspect_cmd
from gpufleet.cli import lock as lock_cmd
from gpufleet.cli import plan as plan_cmd
from gpufleet.cli import report as report_cmd
from gpufleet.cli import validate as validate_cmd

app = typer.Typer(
    name="gpufleet",
    help="Infrastructure-as-code for ML GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _options(max_input_mb: Annotated[float | None, typer.Option(
        "--max-input-mb", min=0.001, max=1 << 20,
        help="Raise (or lower) the size limit of every input file, in MiB (default: 8 for YAML, 64 for logs).")]
        = None) -> None:
    """Infrastructure-as-code for ML GPU clusters."""
    if max_input_mb is not None:
        from gpufleet.inputs import LIMIT_ENV

        os.environ[LIMIT_ENV] = str(max_input_mb)


cluster.register(app)
app.add_typer(lock_cmd.app, name="lock", help="Show and check the stack's version lock.")
app.add_typer(inspect_cmd.app, name="inspect",
              help="Parse real tool output offline (nvidia-smi XML, topo -m, nvlink -s, nccl-tests).")
app.registered_commands.extend(plan_cmd.app.registered_commands)
app.command("drift")(drift_cmd.drift_command)
app.command("remediate")(drift_cmd.remediate_command)
app.command("validate")(validate_cmd.validate_command)
app.command("audit")(audit_cmd.audit_command)
report_cmd.register(app)
bench_cmd.register(validate_cmd.app)
app.add_typer(validate_cmd.app, name="bench", help="Acceptance benchmarks: render job templates, gate results.")


def main() -> None:
    app()
