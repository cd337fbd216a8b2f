"""Parser of fio's JSON output (``--output-format=json``, also inside ``json,normal``) and storage gates.

fio prints one JSON document (``"fio version"``, ``"jobs": [{"jobname", "error", "read" | "write" | "trim":
{"io_bytes", "bw_bytes", "iops", "runtime", "clat_ns": {"percentile": {"99.000000": ns}}}}]``); with
``json,normal`` or a job-layout preamble the document sits between text lines, so parsing starts at the first
line that is ``{`` and stops where the document ends. Field names: fio's HOWTO, "Interpreting the output" and
"JSON output" (https://fio.readthedocs.io/en/latest/fio_doc.html). ``bw_bytes`` is bytes/s; ``runtime`` ms.

Like the nccl-tests parser: a job with ``error != 0`` is a failed run (ParseError with the job's error), and
every number must be finite (``NaN``/``Infinity`` refused: a NaN bandwidth would pass no gate and fail none).
Gates compare the sum over jobs of one direction (fio without ``group_reporting`` prints one job per process).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from gpufleet.parsers.errors import ParseError

Direction = Literal["read", "write"]


@dataclass(frozen=True)
class FioSide:
    io_bytes: int
    bw_bytes: float
    iops: float
    runtime_ms: int
    #: 99th percentile completion latency (ns); None when fio recorded no percentiles.
    clat_p99_ns: float | None


@dataclass(frozen=True)
class FioJob:
    name: str
    rw: str | None
    read: FioSide | None
    write: FioSide | None


@dataclass(frozen=True)
class FioResult:
    version: str | None
    jobs: list[FioJob]

    def total(self, direction: Direction) -> tuple[float, float] | None:
        """(bytes/s, IOPS) summed over the jobs that moved data in ``direction``; None when none did."""
        sides = [s for j in self.jobs if (s := getattr(j, direction)) is not None and s.io_bytes > 0]
        if not sides:
            return None
        return sum(s.bw_bytes for s in sides), sum(s.iops for s in sides)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _refuse(name: str) -> Any:
    raise ParseError(f"non-finite number {name} in fio JSON: refused")


def _num(data: dict[str, Any], key: str, where: str) -> float:
    v = data.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ParseError(f"{where}.{key} = {v!r}: expected a number")
    if not math.isfinite(v) or v < 0:
        raise ParseError(f"{where}.{key} = {v!r}: expected a finite number >= 0")
    return float(v)


def _side(data: Any, where: str) -> FioSide | None:
    if not isinstance(data, dict):
        return None
    p99: float | None = None
    pct = (data.get("clat_ns") or {}).get("percentile") if isinstance(data.get("clat_ns"), dict) else None
    if isinstance(pct, dict) and "99.000000" in pct:
        p99 = _num(pct, "99.000000", f"{where}.clat_ns.percentile")
    return FioSide(io_bytes=int(_num(data, "io_bytes", where)), bw_bytes=_num(data, "bw_bytes", where),
                   iops=_num(data, "iops", where), runtime_ms=int(_num(data, "runtime", where)), clat_p99_ns=p99)


def _document(text: str) -> Any:
    lines = text.splitlines(keepends=True)
    offset = 0
    for line in lines:
        if line.strip() == "{":
            break
        offset += len(line)
    else:
        raise ParseError("no JSON document (a line that is '{'): run fio with --output-format=json",
                         details=[ln.strip() for ln in lines if "error" in ln.lower()][:5])
    try:
        doc, _ = json.JSONDecoder(parse_constant=_refuse).raw_decode(text, offset + text[offset:].index("{"))
    except json.JSONDecodeError as e:
        raise ParseError(f"fio JSON is truncated or malformed: {e}") from None
    return doc


def parse_fio(text: str) -> FioResult:
    """fio's JSON result; ParseError for a failed job, a non-finite value or no jobs."""
    doc = _document(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise ParseError('not fio JSON output (no "jobs" list)')
    gopts = doc.get("global options") or {}
    jobs: list[FioJob] = []
    for i, job in enumerate(doc["jobs"]):
        if not isinstance(job, dict):
            raise ParseError(f"jobs[{i}] is not an object")
        name = str(job.get("jobname", f"job{i}"))
        err = job.get("error", 0)
        if err:
            raise ParseError(f"fio job {name!r} failed: error {err}", details=[str(job.get("error_string", ""))])
        opts = job.get("job options") or {}
        jobs.append(FioJob(name, opts.get("rw") or gopts.get("rw"), _side(job.get("read"), f"{name}.read"),
                           _side(job.get("write"), f"{name}.write")))
    if not jobs:
        raise ParseError("fio JSON lists no job")
    return FioResult(doc.get("fio version"), jobs)


@dataclass(frozen=True)
class FioGate:
    direction: Direction
    #: Minimum bytes/s (sequential gates) and/or IOPS (random 4k gates); None: not gated.
    min_bw_bytes: float | None = None
    min_iops: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for v in (self.min_bw_bytes, self.min_iops):
            if v is not None and (not math.isfinite(v) or v <= 0):
                raise ValueError(f"fio gate threshold {v!r}: expected a finite number > 0")


@dataclass(frozen=True)
class FioVerdict:
    direction: Direction
    status: Literal["pass", "fail", "no-data"]
    bw_bytes: float | None
    iops: float | None
    gate: FioGate
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def gate_fio(result: FioResult, gate: FioGate) -> FioVerdict:
    """Pass when the direction's summed bandwidth and IOPS reach the gate (``>=``); no-data: nothing moved."""
    total = result.total(gate.direction)
    if total is None:
        return FioVerdict(gate.direction, "no-data", None, None, gate,
                          f"no job moved data in direction {gate.direction}")
    bw, iops = total
    short = []
    if gate.min_bw_bytes is not None and bw < gate.min_bw_bytes:
        short.append(f"{bw / 1e6:.1f} MB/s < {gate.min_bw_bytes / 1e6:.1f} MB/s")
    if gate.min_iops is not None and iops < gate.min_iops:
        short.append(f"{iops:.0f} IOPS < {gate.min_iops:.0f} IOPS")
    return FioVerdict(gate.direction, "fail" if short else "pass", bw, iops, gate, "; ".join(short) or "ok")
