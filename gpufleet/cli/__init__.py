"""The ``gpufleet`` command line."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="gpufleet",
    help="Infrastructure-as-code for ML GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
)


def main() -> None:
    app()
