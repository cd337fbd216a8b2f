"""Parser of mdtest's text output (the IOR/mdtest project, https://github.com/hpc/ior) and metadata gates.

mdtest ends with a rate table, one row per phase, ops/s over the iterations::

    SUMMARY rate: (of 3 iterations)
       Operation                      Max            Min           Mean        Std Dev
       ---------                      ---            ---           ----        -------
       File creation     :        439.763        404.632        422.661         14.357

mdtest 1.9 and 3.x put a ``:`` after the operation, 4.0 does not; 1.9 may print ``SUMMARY:`` without
``rate``; 3.x and later print a ``SUMMARY time:`` table after it (not read here) and rows such as
``File create (stonewall)`` whose columns are ``NA``. A phase mdtest did not run (``-C`` creates only) is
printed as zeros: such a row is "not run", and a gate on it has no data (it never passes).

Like the fio and nccl-tests parsers, every number must be finite (``nan``/``inf`` refused: a NaN rate would pass
no gate and fail none), non-negative, and ``min <= mean <= max``.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpufleet.parsers.errors import ParseError

_LAUNCH = re.compile(r"^mdtest-(\S+) was launched with (\d+) total task\(s\) on (\d+) node\(s\)", re.MULTILINE)
_SUMMARY = re.compile(r"^\s*SUMMARY(?: rate)?:\s*\(of (\d+) iterations?\)\s*$")
_ROW = re.compile(r"^\s*([A-Za-z][A-Za-z ()]*?)\s*:?\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")
#: Where the rate table ends (besides a blank line after its rows): the time table, mdtest's closing line.
_STOP = re.compile(r"^\s*SUMMARY time|^-- finished")

#: The gated phases and their row names.
OPERATIONS = {"creates": "File creation", "stats": "File stat", "reads": "File read", "removals": "File removal"}
Metric = Literal["creates", "stats", "reads", "removals"]


@dataclass(frozen=True)
class MdtestRate:
    operation: str
    #: ops/s over the iterations; None where mdtest printed NA (stonewall rows).
    max: float | None
    min: float | None
    mean: float | None
    stddev: float | None

    @property
    def ran(self) -> bool:
        """False for a phase mdtest skipped: it prints zeros (or NA) for it."""
        return any(v for v in (self.max, self.min, self.mean))


@dataclass(frozen=True)
class MdtestResult:
    version: str | None
    tasks: int | None
    nodes: int | None
    iterations: int
    rates: list[MdtestRate]

    def rate(self, operation: str) -> MdtestRate | None:
        return next((r for r in self.rates if r.operation == operation), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _value(token: str, where: str) -> float | None:
    if token == "NA":
        return None
    try:
        v = float(token)
    except ValueError:
        raise ParseError(f"{where}: {token!r} is not a number") from None
    if not math.isfinite(v):
        raise ParseError(f"{where}: non-finite number {token!r} refused")
    if v < 0:
        raise ParseError(f"{where}: {token!r} is negative: a rate is >= 0")
    return v


def parse_mdtest(text: str) -> MdtestResult:
    """mdtest's SUMMARY rate table; ParseError when there is none, or a value is not a finite rate."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _SUMMARY.match(ln)), None)
    if start is None:
        raise ParseError("no 'SUMMARY rate: (of N iterations)' table: mdtest did not finish, or this is not "
                         "mdtest output", details=[ln.strip() for ln in lines if "error" in ln.lower()][:5])
    m = _SUMMARY.match(lines[start])
    assert m is not None
    iterations = int(m.group(1))
    rates: list[MdtestRate] = []
    for ln in lines[start + 1:]:
        stripped = ln.strip()
        if _STOP.match(ln) or (not stripped and rates):
            break
        if not stripped or stripped.startswith("Operation") or set(stripped) <= {"-", " "}:
            continue  # a blank line before the rows, the header and its dashes
        row = _ROW.match(ln)
        if row is None:
            raise ParseError(f"unreadable SUMMARY row {stripped[:80]!r}")
        op = " ".join(row.group(1).split())
        mx, mn, mean, sd = (_value(t, f"{op} {col}") for t, col in
                            zip(row.groups()[1:], ("max", "min", "mean", "std dev"), strict=True))
        if None not in (mx, mn, mean):
            assert mx is not None and mn is not None and mean is not None
            # Printed with three decimals: allow the rounding, refuse a mean outside its own range.
            if not mn - 0.001 <= mean <= mx + 0.001:
                raise ParseError(f"{op}: mean {mean:g} is not between min {mn:g} and max {mx:g}: not a measurement")
        rates.append(MdtestRate(op, mx, mn, mean, sd))
    if not rates:
        raise ParseError("the SUMMARY rate table has no rows (output cut?)")
    launch = _LAUNCH.search(text)
    return MdtestResult(launch.group(1) if launch else None, int(launch.group(2)) if launch else None,
                        int(launch.group(3)) if launch else None, iterations, rates)


@dataclass(frozen=True)
class MdtestGate:
    metric: Metric
    #: Minimum mean ops/s over the iterations.
    min_ops: float
    source: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.min_ops) or self.min_ops <= 0:
            raise ValueError(f"mdtest gate threshold {self.min_ops!r}: expected a finite number > 0")


@dataclass(frozen=True)
class MdtestVerdict:
    metric: Metric
    operation: str
    status: Literal["pass", "fail", "no-data"]
    mean_ops: float | None
    gate: MdtestGate
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def gate_mdtest(result: MdtestResult, gate: MdtestGate) -> MdtestVerdict:
    """Pass when the phase's mean rate reaches the gate (``>=``); no-data when the phase did not run."""
    op = OPERATIONS[gate.metric]
    rate = result.rate(op)
    if rate is None or not rate.ran or rate.mean is None:
        return MdtestVerdict(gate.metric, op, "no-data", None, gate,
                             f"mdtest did not run {op!r} (no row, or zeros: add the phase, e.g. -C -T)")
    if rate.mean < gate.min_ops:
        return MdtestVerdict(gate.metric, op, "fail", rate.mean, gate,
                             f"{rate.mean:.1f} ops/s < {gate.min_ops:.1f} ops/s")
    return MdtestVerdict(gate.metric, op, "pass", rate.mean, gate, "ok")
