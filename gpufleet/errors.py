"""Errors that tell the user exactly what to fix, before anything is touched.

Every error gpufleet expects (a bad stack file, an unreadable input, a tool output it cannot parse) is a
:class:`GpufleetError`: a heading saying what kind of error it is, and one or more :class:`ConfigProblem`
(file, key path, value, message, fix). The CLI prints them one per line on stderr, or as JSON on stdout
with ``--json`` (``{"error": {"file", "key", "value", "message", "fix"}}``), and exits 1
(:mod:`gpufleet.cli.contract`).
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any

#: Longest excerpt of a value an error prints: a value can be a 5 MB string or an alias bomb.
EXCERPT_CHARS = 200

_repr = reprlib.Repr()
_repr.maxlevel = 3
_repr.maxdict = _repr.maxlist = _repr.maxtuple = _repr.maxset = 6
_repr.maxstring = EXCERPT_CHARS
_repr.maxother = EXCERPT_CHARS
_repr.maxlong = 40


def excerpt(value: Any) -> str:
    """A bounded ``repr`` of ``value``: nested containers and long strings are cut (never walks it all)."""
    text = _repr.repr(value)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 3] + "..."


def json_value(value: Any) -> Any:
    """``value`` as it goes into a JSON error: short scalars as they are, anything else as an excerpt."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str) and len(value) <= EXCERPT_CHARS:
        return value
    return excerpt(value)


#: Shown instead of a secret's value (a clear-text kubeconfig must not reach logs a second time).
REDACTED = "<redacted>"


@dataclass
class ConfigProblem:
    """One invalid setting: where it is, what it holds, which rule it breaks, how to fix it."""

    file: str
    key: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        # "= value" only when there is one; the key only when the problem has one (a file-level problem has "-").
        where = "" if self.key == "-" else f" {self.key}" + ("" if self.value is None else f" = {excerpt(self.value)}")
        return f"{self.file}:{where}: {self.rule}. Fix: {self.fix}" if where else \
            f"{self.file}: {self.rule}. Fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "key": self.key, "value": json_value(self.value), "message": self.rule,
                "fix": self.fix}


class GpufleetError(Exception):
    """An expected error: a heading (what kind of error) and the problems, each with file, key, value, fix."""

    #: Heading printed above the problems; subclasses and callers say what kind of error it is.
    kind = "error"

    def __init__(self, problems: list[ConfigProblem], kind: str | None = None) -> None:
        self.problems = problems
        if kind is not None:
            self.kind = kind
        super().__init__("\n".join(str(p) for p in problems))

    def to_json(self) -> dict[str, Any]:
        """``{"error": first problem + kind, "errors": every problem}``: one shape for every command."""
        problems = [p.to_json() | {"kind": self.kind} for p in self.problems]
        return {"error": problems[0] if problems else {"kind": self.kind}, "errors": problems}


class ConfigError(GpufleetError):
    """One or more configuration problems; raised before any host or resource is changed."""

    kind = "configuration problem"


class InputError(GpufleetError):
    """An input file (stack, log, capture) that cannot be read as what it should be."""

    kind = "input error"

    @classmethod
    def one(cls, file: str, message: str, fix: str, *, key: str = "-", value: Any = None,
            kind: str | None = None) -> InputError:
        return cls([ConfigProblem(file, key, value, message, fix)], kind=kind)
