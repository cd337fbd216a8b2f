"""Every ``gpufleet`` command is wrapped by the one error contract (gpufleet.cli.contract)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from rich.table import Table

from gpufleet.cli import app
from gpufleet.cli.contract import console_for, dumps, is_wrapped
from gpufleet.errors import ConfigProblem, InputError


def _commands(t: typer.Typer, prefix: str = "") -> Iterator[tuple[str, Any]]:
    for c in t.registered_commands:
        name = c.name or (c.callback.__name__ if c.callback else "?")
        yield f"{prefix}{name}", c.callback
    for g in t.registered_groups:
        assert g.typer_instance is not None
        yield from _commands(g.typer_instance, f"{prefix}{g.name} ")


def test_every_command_is_wrapped() -> None:
    commands = dict(_commands(app))
    assert len(commands) >= 14, sorted(commands)
    unwrapped = sorted(name for name, cb in commands.items() if not is_wrapped(cb))
    assert unwrapped == []


def test_json_is_strict() -> None:
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps({"busbw": math.inf})


def test_error_json_shape() -> None:
    err = InputError([ConfigProblem("f.yaml", "gpufleet:x", float("nan"), "bad", "fix it")], kind="input error")
    data = json.loads(dumps(err.to_json()))
    assert data["error"] == {"file": "f.yaml", "key": "gpufleet:x", "value": "nan", "message": "bad",
                             "fix": "fix it", "kind": "input error"}
    assert data["errors"] == [data["error"]]


def test_console_into_a_pipe_is_wide_enough_for_tables() -> None:
    # Under pytest stdout and stderr are not terminals: rich would assume 80 columns and cut plan's pool table
    # ("a3-meg…"); every command's console comes from console_for.
    assert console_for().width == 160
    assert console_for(stderr=True).width == 160
    table = Table("pool", "instance type", "nodes", "GPUs", "fabric", "placement", "capacity", "USD/h")
    table.add_row("a3mega", "a3-megagpu-8g", "2 (max 2)", "16 (8 x h100-sxm5-80gb)", "GPUDirect-TCPXO, 8 GPU NICs",
                  "compact placement, us-east4-a", "on-demand", "184.43")
    con = console_for()
    with con.capture() as cap:
        con.print(table)
    assert "a3-megagpu-8g" in cap.get() and "GPUDirect-TCPXO, 8 GPU NICs" in cap.get()
