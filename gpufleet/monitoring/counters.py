"""Reader of dcgm-exporter collectors files (``FIELD, prometheus type, help`` lines, ``#`` comments)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(
    r"^(?P<hash>#\s*)?(?P<field>DCGM_[A-Z0-9_]+)\s*,\s*(?P<type>[a-z]+)\s*(?:,\s*(?P<help>.*))?$"
)


@dataclass(frozen=True)
class Counter:
    field: str
    prom_type: str
    help: str


def parse_counters(text: str, *, include_commented: bool = False) -> list[Counter]:
    """Counters of a collectors file; ``include_commented`` also returns the ``# FIELD, type`` lines
    upstream ships disabled (they still name fields the exporter knows)."""
    out = []
    for raw in text.splitlines():
        m = _LINE.match(raw.strip())
        if m and (include_commented or not m["hash"]):
            out.append(Counter(m["field"], m["type"], (m["help"] or "").strip()))
    return out
