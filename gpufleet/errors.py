"""Errors that tell the user exactly what to fix, before anything is touched."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class ConfigProblem:
    """One invalid setting: where it is, what it holds, which rule it breaks, how to fix it."""

    file: str
    key: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key} = {self.value!r}: {self.rule}. Fix: {self.fix}"


class ConfigError(Exception):
    """One or more configuration problems; raised before any host or resource is changed."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))
