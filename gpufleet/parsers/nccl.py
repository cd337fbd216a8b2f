"""Parser of nccl-tests output (``all_reduce_perf`` and friends): the text table and the ``-J`` JSON file.

Text logs are read as printed by nccl-tests' ``writeResultHeader``/``writeBenchmarkLine*`` (src/util.cu in
NVIDIA/nccl-tests), tolerating what launchers and copy-paste add around them:

* line prefixes from ``srun -l`` (``0: ``) and ``mpirun --tag-output`` (``[1,0]<stdout>:``), indentation;
* any other lines around the table (command lines, ``NCCL version``, OpenMPI notices, ``...`` elisions);
* ``N/A`` in the ``#wrong`` column (runs with ``-c 0``) -> ``wrong: None``;
* ``%g`` formatted wrong counts (``1.23457e+06``) and the extra per-iteration columns (``-I``);
* multi-node device lists (``#  Rank 8 Group 0 Pid ... on host2 device 0 [0000:0f:00] NAME``, also the
  pre-2.24 ``[0x0f]`` bus-id form and ``{hostname}`` placeholders).

Failure decision (documented in docs/validation.md): a log in which nccl-tests reported a fatal error
(``Test ... failure``, ``NCCL failure``, ``Invalid number of GPUs``) or that holds no result row at all
raises :class:`ParseError` naming the lines that explain why. A log with rows but silent data corruption
parses: the non-zero ``wrong`` counts and ``out_of_bounds`` are in the result for the gate to reject.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.parsers.errors import ParseError

#: Collectives nccl-tests ships a ``<name>_perf`` binary for.
COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "alltoall",
    "broadcast",
    "reduce_scatter",
    "reduce",
    "sendrecv",
    "scatter",
    "gather",
    "hypercube",
)

_PREFIX = re.compile(r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:(?=\s))?")
_DEVICE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d{1,7})\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(?P<host>\S+)\s+"
    r"device\s+(?P<device>\d{1,3})\s+\[[^\]]*\]\s+(?P<name>.+?)\s*$"
)
_STARTING = re.compile(r"Collective test (?:starting|concluded):\s+(\w+?)_perf\b")
_BINARY = re.compile(r"\b(" + "|".join(COLLECTIVES) + r")_perf\b")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d{1,20})\b")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
#: Lines that begin an nccl-tests run: its banner, its parameters line, its table header.
_RUN_START = re.compile(r"^#\s*(Collective test starting|nThread\s|size\s+count\s+type)")
#: A result row begins with the size and the element count.
_ROW_START = re.compile(r"^\d+\s+\d+\s")
_FAILURES = (
    re.compile(r"Test .*failure"),
    re.compile(r"NCCL failure"),
    re.compile(r"Invalid number of GPUs"),
    re.compile(r"There are not enough slots available"),
    re.compile(r"MPI_ABORT was invoked"),
)
# Digits bounded in the grammar: a size of thousands of digits is not a row (and int() would refuse it).
_INT = re.compile(r"^\d{1,20}$")
#: Result rows a log may hold: a sweep from 8 B to 16 GiB is ~32 rows per run; this bounds memory (~600 B a row).
MAX_ROWS = 100_000
#: Longest number token read (a float such as 417.53 or 1.2e+02; 1e400 digits are not a measurement).
_MAX_NUMBER_CHARS = 32


@dataclass(frozen=True)
class Measurement:
    """One half (out-of-place or in-place) of a result row."""

    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    #: Elements that failed validation; None when the run did not check (``N/A``).
    wrong: int | None


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count: int
    type: str
    redop: str
    out_of_place: Measurement | None
    in_place: Measurement | None


@dataclass(frozen=True)
class NcclDevice:
    rank: int
    host: str
    device: int
    name: str


@dataclass(frozen=True)
class NcclResult:
    #: e.g. "all_reduce"; None when the log names no binary (a pasted table).
    collective: str | None
    #: Ranks listed under "# Using devices"; None when the log does not list them.
    nranks: int | None
    rows: list[NcclRow]
    avg_busbw_gbs: float | None
    out_of_bounds: int | None
    devices: list[NcclDevice]

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape ``gpufleet inspect nccl --json`` prints."""
        return asdict(self)

    @property
    def wrong_total(self) -> int:
        """Elements that failed validation across all rows (0 when nothing was checked)."""
        return sum(
            m.wrong or 0 for r in self.rows for m in (r.out_of_place, r.in_place) if m is not None
        )


def _finite(value: float, what: Any) -> float:
    # float() reads "nan", "inf" and "1e999": none is a measurement, and an infinite busbw would pass the gate.
    if not math.isfinite(value):
        raise ParseError(f"not a finite number in the result table: {what!r}")
    return value


def _number(token: str) -> float:
    try:
        if len(token) > _MAX_NUMBER_CHARS:
            raise ValueError(token)
        number = float(token)
    except ValueError:
        raise ParseError(f"not a number in the result table: {token[:40]!r}") from None
    return _finite(number, token)


def _wrong(token: str) -> int | None:
    return None if token == "N/A" else int(_number(token))


def _measurement(tokens: list[str]) -> Measurement:
    return Measurement(
        time_us=_number(tokens[0]),
        algbw_gbs=_number(tokens[1]),
        busbw_gbs=_number(tokens[2]),
        wrong=_wrong(tokens[3]),
    )


def _strip(line: str) -> str:
    return _PREFIX.sub("", line, count=1).strip()


def _header_layout(tokens: list[str]) -> tuple[bool, int]:
    """From the ``# size count type redop root time ...`` header: has a root column, columns per half."""
    has_root = "root" in tokens
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    per_half = times[1] - times[0] if len(times) >= 2 else 4
    return has_root, per_half


def _row(tokens: list[str], has_root: bool, per_half: int) -> NcclRow | None:
    keys = 5 if has_root else 4
    if len(tokens) < keys + 4 or not (_INT.match(tokens[0]) and _INT.match(tokens[1])):
        return None
    body = tokens[keys:]
    if len(body) >= 2 * per_half or len(body) >= per_half + 4:
        oop: Measurement | None = _measurement(body[0:4])
        ip: Measurement | None = _measurement(body[per_half : per_half + 4])
    else:
        # Trace-replay runs print only the in-place half.
        oop, ip = None, _measurement(body[0:4])
    return NcclRow(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        type=tokens[2],
        redop=tokens[3],
        out_of_place=oop,
        in_place=ip,
    )


def _collective(text: str) -> str | None:
    m = _STARTING.search(text) or _BINARY.search(text)
    return m.group(1) if m else None


def split_runs(text: str) -> list[str]:
    """A log of several runs one after another (two jobs' outputs concatenated, a rerun appended) cut into one
    text per run, so that each is gated and none hides another: a run begins at a banner, parameters or
    table header line that follows result rows. A log of one run is one text."""
    runs: list[list[str]] = [[]]
    rows_seen = False
    for raw in text.splitlines(keepends=True):
        line = _strip(raw)
        if rows_seen and _RUN_START.match(line):
            runs.append([])
            rows_seen = False
        runs[-1].append(raw)
        rows_seen = rows_seen or _ROW_START.match(line) is not None
    return ["".join(r) for r in runs]


def _parse_text(lines: Iterable[str]) -> NcclResult:
    """One pass over the log's lines: memory grows with the result rows, not with the log."""
    failures: list[str] = []
    has_root, per_half = True, 4
    rows: list[NcclRow] = []
    devices: list[NcclDevice] = []
    avg: float | None = None
    oob: int | None = None
    starting: str | None = None
    binary: str | None = None
    for raw in lines:
        if starting is None and (m := _STARTING.search(raw)):
            starting = m.group(1)
        if binary is None and (m := _BINARY.search(raw)):
            binary = m.group(1)
        line = _strip(raw)
        if any(p.search(line) for p in _FAILURES):
            failures.append(line)
            continue
        if failures:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if tokens[:3] == ["size", "count", "type"]:
                has_root, per_half = _header_layout(tokens)
            elif m := _DEVICE.match(line):
                devices.append(
                    NcclDevice(
                        rank=int(m["rank"]), host=m["host"], device=int(m["device"]), name=m["name"]
                    )
                )
                if len(devices) > MAX_ROWS:
                    raise ParseError(f"more than {MAX_ROWS:,} rank lines: not one nccl-tests log")
            elif m := _OOB.match(line):
                oob = int(m.group(1))
            elif m := _AVG.match(line):
                avg = _number(m.group(1))
            continue
        row = _row(line.split(), has_root, per_half)
        if row is not None:
            rows.append(row)
            if len(rows) > MAX_ROWS:
                raise ParseError(f"more than {MAX_ROWS:,} result rows: not one nccl-tests log")

    if failures:
        raise ParseError("nccl-tests run failed", details=failures)
    if not rows:
        raise ParseError(
            "no nccl-tests result rows found (expected lines like "
            "'  1073741824  268435456  float  sum  -1  8109.1  132.41  231.72  0 ...')"
        )
    return NcclResult(
        collective=starting or binary,
        nranks=len(devices) or None,
        rows=rows,
        avg_busbw_gbs=avg,
        out_of_bounds=oob,
        devices=devices,
    )


def _json_float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ParseError(f"nccl-tests JSON: {what} is not a number: {value!r}"[:300])
    try:
        number = float(value)
    except ValueError:
        raise ParseError(f"nccl-tests JSON: {what} is not a number: {value!r}"[:300]) from None
    return _finite(number, value)


def _json_int(value: Any, what: str) -> int:
    number = _json_float(value, what)
    if number != int(number):
        raise ParseError(f"nccl-tests JSON: {what} is not an integer: {value!r}"[:300])
    return int(number)


def _bounded_int(text: str) -> int:
    # Before int(): Python refuses over 4300 digits with a ValueError json.loads does not wrap.
    if len(text) > 20:
        raise json.JSONDecodeError(f"an integer of {len(text)} digits", text[:40], 0)
    return int(text)


def _refuse_constant(name: str) -> float:
    raise ParseError(f"nccl-tests JSON holds {name}, which is not JSON and not a measurement")


def _json_measurement(d: Any) -> Measurement | None:
    if not isinstance(d, dict):
        return None
    nwrong = d.get("nwrong")
    # "cpu_time" replaces "time" when the run used -C (report CPU time).
    time = d.get("time", d.get("cpu_time"))
    return Measurement(
        time_us=_json_float(time, "time"),
        algbw_gbs=_json_float(d.get("alg_bw"), "alg_bw"),
        busbw_gbs=_json_float(d.get("bus_bw"), "bus_bw"),
        wrong=None if nwrong is None else _json_int(nwrong, "nwrong"),
    )


def _parse_json(text: str) -> NcclResult:
    """The file ``-J``/``--output_file`` writes (JSON_FILE_VERSION 2 in nccl-tests' util.cu)."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ParseError(f"not valid nccl-tests JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ParseError("nccl-tests JSON has no 'results' list; is it the file -J wrote?")
    try:
        return _json_result(doc)
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        if isinstance(e, ParseError):
            raise
        raise ParseError(f"nccl-tests JSON of an unexpected shape ({type(e).__name__}: {str(e)[:200]}); "
                         "is it the file -J wrote?") from None


def _json_result(doc: dict[str, Any]) -> NcclResult:
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        raise ParseError("nccl-tests run failed", details=[str(e) for e in errors])
    config = doc.get("config") or {}
    devices = [
        NcclDevice(
            rank=_json_int(d["rank"], "rank"), host=str(d["hostname"]), device=_json_int(d["device"], "device"),
            name=str(d["device_info"])
        )
        for d in config.get("devices") or doc.get("devices") or []
    ]
    rows = [
        NcclRow(
            size_bytes=_json_int(r["size"], "size"),
            count=_json_int(r["count"], "count"),
            type=str(r["type"]),
            redop=str(r["redop"]),
            out_of_place=_json_measurement(r.get("out_of_place")),
            in_place=_json_measurement(r.get("in_place")),
        )
        for r in doc["results"]
    ]
    if not rows:
        raise ParseError("nccl-tests JSON holds no result rows")
    args = doc.get("args") or []
    oob = doc.get("out_of_bounds") or {}
    avg = doc.get("average_bus_bandwidth") or {}
    return NcclResult(
        collective=_collective(" ".join(str(a) for a in args[:1])),
        nranks=len(devices) or None,
        rows=rows,
        avg_busbw_gbs=_json_float(avg["bandwidth"], "bandwidth") if "bandwidth" in avg else None,
        out_of_bounds=_json_int(oob["count"], "out_of_bounds.count") if "count" in oob else None,
        devices=devices,
    )


def parse_nccl(text: str) -> NcclResult:
    """Parse an nccl-tests log (text) or its ``-J`` JSON file; raise ParseError for failed runs."""
    if text.lstrip().startswith("{"):
        return _parse_json(text)
    return _parse_text(text.splitlines())


def parse_nccl_lines(lines: Iterable[str]) -> NcclResult:
    """:func:`parse_nccl` over lines as they are read (gpufleet.inputs.iter_lines): a large log streams."""
    it = iter(lines)
    head: list[str] = []
    for line in it:
        head.append(line)
        if line.strip():
            break
    if head and head[-1].lstrip().startswith("{"):
        return _parse_json("\n".join(itertools.chain(head, it)))
    return _parse_text(itertools.chain(head, it))
