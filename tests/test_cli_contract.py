"""Every ``gpufleet`` command is wrapped by the one error contract (gpufleet.cli.contract)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from gpufleet.cli import app
from gpufleet.cli.contract import dumps, is_wrapped
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
