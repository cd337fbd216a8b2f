"""The one error contract of every ``gpufleet`` command.

* Exit codes: 0 success, 1 any error (configuration, input, run), 2 drift found (``gpufleet drift``) and the
  command-line framework's own usage errors (unknown option, missing argument).
* An expected error (:class:`~gpufleet.errors.GpufleetError`, a parser's ``ParseError``) never shows a
  traceback: a heading that says what kind of error it is, then one line per problem (file, key, value,
  message, fix) on stderr.
* With ``--json``, stdout is JSON also on error: ``{"error": {"file", "key", "value", "message", "fix",
  "kind"}, "errors": [...]}``; JSON output is strict (no NaN/Infinity).

Every command function is wrapped with :func:`contract`; tests/test_cli_contract.py walks them all.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console

from gpufleet.errors import ConfigProblem, GpufleetError, InputError
from gpufleet.parsers.errors import ParseError

EXIT_OK, EXIT_ERROR, EXIT_DRIFT = 0, 1, 2

#: Names the commands give their ``--json`` parameter.
JSON_PARAMS = ("json_out", "as_json")

P = ParamSpec("P")
R = TypeVar("R")


def console_for(*, stderr: bool = False) -> Console:
    """The console a command prints to: the terminal's width on a terminal; 160 columns into a pipe or file,
    where rich would otherwise assume 80 and squeeze tables (plan's pool table, drift's findings)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def dumps(data: Any, *, indent: int | None = 2) -> str:
    """Strict JSON (``allow_nan=False``): a non-finite number is a bug to surface, not ``Infinity`` to emit."""
    return json.dumps(data, indent=indent, sort_keys=True, default=str, allow_nan=False)


def print_json(data: Any) -> None:
    typer.echo(dumps(data))


def report(err: GpufleetError, *, as_json: bool) -> None:
    """Print ``err``: JSON on stdout with ``--json``, and always the human text on stderr."""
    if as_json:
        typer.echo(dumps(err.to_json()))
    n = len(err.problems)
    typer.echo(f"error: {err.kind}" + (f" ({n} problems)" if n > 1 else ""), err=True)
    for p in err.problems:
        typer.echo(f"- {p}", err=True)


def fail(err: GpufleetError, *, as_json: bool) -> NoReturn:
    report(err, as_json=as_json)
    raise typer.Exit(EXIT_ERROR)


def parse_failure(file: str, e: ParseError) -> InputError:
    """A parser's ParseError as the contract's error (kind "parse error")."""
    return InputError([ConfigProblem(file, "-", None, str(e), "pass the tool's unmodified output (see "
                                     "docs/validation.md for what is parsed)")], kind="parse error")


def contract(func: Callable[P, R]) -> Callable[P, R]:
    """Wrap a command: expected errors become the one-line error and exit 1 (JSON on stdout with --json)."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        as_json = any(bool(kwargs.get(k)) for k in JSON_PARAMS)
        try:
            return func(*args, **kwargs)
        except GpufleetError as e:
            fail(e, as_json=as_json)
        except ParseError as e:
            fail(parse_failure("-", e), as_json=as_json)

    wrapper.__gpufleet_contract__ = True  # type: ignore[attr-defined]
    return wrapper


def is_wrapped(func: Callable[..., Any]) -> bool:
    return bool(getattr(func, "__gpufleet_contract__", False))


