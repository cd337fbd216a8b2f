"""Acceptance gate on nccl-tests bus bandwidth at large messages.

Rules, so that one number cannot hide a problem:

* only rows of at least ``min_size_bytes`` count (default 1 GiB): smaller messages are latency-bound
  and never reach the link's bandwidth;
* the gate compares the **out-of-place busbw of the largest such row** (nccl-tests' "busbw" already
  normalises algbw by the collective's traffic factor, so it is comparable to link speed); algbw is
  reported next to it, never gated on;
* the "Avg bus bandwidth" line is ignored: it averages every size, tiny ones included;
* any ``#wrong`` element or out-of-bounds value among the considered rows fails the gate whatever the
  bandwidth (corrupted data is not performance);
* no row large enough -> ``missing-size``: the run cannot prove the gate, so it neither passes nor fails.

Gate numbers per GPU model live in the catalog (``gpufleet.catalog``); this module takes the number.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpufleet.parsers.nccl import NcclResult, NcclRow

GIB = 1 << 30

GateStatus = Literal["pass", "fail", "missing-size"]


@dataclass(frozen=True)
class GateResult:
    status: GateStatus
    gate_gbs: float
    min_size_bytes: int
    #: Size of the row the gate was judged on (the largest >= min_size_bytes).
    size_bytes: int | None
    busbw_gbs: float | None
    algbw_gbs: float | None
    #: Out-of-place busbw of every considered row, by size, for reports and plots.
    busbw_by_size: dict[int, float]
    reason: str

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n} B"


def _wrong(row: NcclRow) -> int:
    return sum(m.wrong or 0 for m in (row.out_of_place, row.in_place) if m is not None)


def evaluate_busbw(result: NcclResult, gate_gbs: float, min_size_bytes: int = GIB) -> GateResult:
    """Judge ``result`` against ``gate_gbs`` (GB/s busbw) on its rows of at least ``min_size_bytes``."""
    rows = sorted(
        (r for r in result.rows if r.size_bytes >= min_size_bytes and r.out_of_place is not None),
        key=lambda r: r.size_bytes,
    )
    by_size = {r.size_bytes: r.out_of_place.busbw_gbs for r in rows if r.out_of_place is not None}

    def verdict(status: GateStatus, reason: str, row: NcclRow | None = None) -> GateResult:
        oop = row.out_of_place if row is not None else None
        return GateResult(
            status=status,
            gate_gbs=gate_gbs,
            min_size_bytes=min_size_bytes,
            size_bytes=row.size_bytes if row is not None else None,
            busbw_gbs=oop.busbw_gbs if oop is not None else None,
            algbw_gbs=oop.algbw_gbs if oop is not None else None,
            busbw_by_size=by_size,
            reason=reason,
        )

    if not rows:
        largest = max((r.size_bytes for r in result.rows), default=0)
        return verdict(
            "missing-size",
            f"no out-of-place result at >= {_size(min_size_bytes)} (largest row: {_size(largest)}); "
            f"rerun with -e 8G or larger",
        )
    corrupt = [r for r in rows if _wrong(r) > 0]
    if corrupt:
        sizes = ", ".join(f"{_size(r.size_bytes)}: {_wrong(r)} wrong" for r in corrupt)
        return verdict("fail", f"data validation failed ({sizes})", rows[-1])
    if result.out_of_bounds:
        return verdict("fail", f"{result.out_of_bounds} out-of-bounds values reported", rows[-1])
    row = rows[-1]
    busbw = row.out_of_place.busbw_gbs if row.out_of_place is not None else 0.0
    if busbw >= gate_gbs:
        return verdict("pass", f"busbw {busbw:g} GB/s at {_size(row.size_bytes)} >= gate {gate_gbs:g}", row)
    return verdict("fail", f"busbw {busbw:g} GB/s at {_size(row.size_bytes)} < gate {gate_gbs:g}", row)
