"""Parser of ``dcgmi diag -r 1|2|3`` output (the table it prints, or ``-j`` JSON) and its findings.

Text: the box table ``dcgmi diag`` prints. Category bands (``|-----  Deployment  ---``, ``+-----  Hardware
---``) name NVIDIA's test categories (Metadata, Deployment, Integration, Hardware, Stress); a row is ``| test |
result |`` with results ``Pass``, ``Fail``, ``Warn``, ``Skip`` and an optional ``- All`` / ``- GPU: 0, 1``;
``Warning`` and ``Info`` rows belong to the test above them. Long cells wrap at a fixed width without a hyphen
(``Enabl`` / ``e persistence``), so continuation lines are joined without adding a space. Real captures:
``../shared/fixtures/real/dcgm/`` (DCGM 3.3.3 level 2 all pass; DCGM 3.3.8 level 3 failing CUDA init because
nvidia-fabricmanager was not running).

JSON (``-j``): ``{"DCGM GPU Diagnostic" | "DCGM Diagnostic": {"test_categories": [{"category", "tests":
[{"name", "results": [{"gpu_ids" | "gpu_id", "status", "warnings", "info"}]}]}], "version"}}`` as NVIDIA's
``NvvsJsonStrings.h`` names the keys; text before the first ``{`` (DCGM logs a warning line there) is skipped,
``null`` entries between tests are ignored. Newer DCGM releases describe results per entity at the top level;
that form is refused with a ParseError naming it rather than read as "no results".
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.parsers.errors import ParseError

#: Normalised statuses; anything else is kept as ``not-run`` (DCGM prints ``Not Run`` for tests it skipped).
STATUSES = ("pass", "fail", "warn", "skip", "not-run")
_STATUS = re.compile(r"^(?P<s>pass|fail(?:ed)?|warn(?:ing)?|skip(?:ped)?|not run)\b\s*(?:-\s*(?P<who>.*))?$",
                     re.IGNORECASE)
_BAND = re.compile(r"^[|+]-{3,}\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-{3,}\+")
_ROW = re.compile(r"^\|(?P<a>[^|]*)\|(?P<b>.*)\|\s*$")
_LEVEL = re.compile(r"dcgmi\s+diag\b.*?(?:-r|--run)\s+(?P<level>[1-4])\b")
_GPU_IN_TEXT = re.compile(r"\bGPU\s+(?P<gpu>\d+)\b")


@dataclass(frozen=True)
class DiagResult:
    #: NVIDIA's category: Deployment, Integration, Hardware, Stress, Performance, Custom.
    category: str
    test: str
    status: str
    #: GPU ids the status applies to; None: all GPUs (``- All``, or a Deployment result for every GPU).
    gpus: list[int] | None
    warnings: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DiagReport:
    source: str  # "text" | "json"
    level: int | None
    dcgm_version: str | None
    driver_version: str | None
    device_ids: list[str]
    results: list[DiagResult]

    @property
    def passed(self) -> bool:
        return all(r.status in ("pass", "skip") for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        return d


def _status(raw: str) -> tuple[str, list[int] | None] | None:
    m = _STATUS.match(raw.strip())
    if not m:
        return None
    s = m["s"].lower()
    status = ("pass" if s.startswith("pass") else "fail" if s.startswith("fail") else
              "warn" if s.startswith("warn") else "skip" if s.startswith("skip") else "not-run")
    who = (m["who"] or "").strip()
    if not who or who.lower() == "all":
        return status, None
    return status, [int(g) for g in re.findall(r"\d+", who)]


def _gpu_list(value: Any) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise ParseError(f"gpu_ids {value!r} is not a GPU id")
    if isinstance(value, int):
        return [value]
    if isinstance(value, str) and re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", value):
        return [int(v) for v in value.split(",")]
    raise ParseError(f"gpu_ids {value!r} is neither an integer nor a comma-separated list of integers")


def _texts(value: Any) -> list[str]:
    """Warnings/info: strings, or objects with a ``warning``/``info`` text (DCGM 2.x+ adds ``error_id``)."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for item in items:
        if isinstance(item, dict):
            text = item.get("warning", item.get("info", item.get("message")))
            if text is not None:
                out.append(str(text))
        elif item is not None:
            out.append(str(item))
    return out


def _parse_json(text: str) -> DiagReport:
    start = text.find("{")
    try:
        doc = json.loads(text[start:])
    except json.JSONDecodeError as e:
        raise ParseError(f"dcgmi diag -j output is not valid JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ParseError("dcgmi diag -j output is not a JSON object")
    root = doc.get("DCGM GPU Diagnostic", doc.get("DCGM Diagnostic"))
    if not isinstance(root, dict):
        raise ParseError('no "DCGM GPU Diagnostic" / "DCGM Diagnostic" object: not dcgmi diag -j output',
                         details=[", ".join(map(str, doc))[:200]])
    cats = root.get("test_categories")
    if not isinstance(cats, list):
        err = root.get("runtime_error") or doc.get("runtime_error")
        raise ParseError("dcgmi diag -j output has no test_categories (a DCGM 4 per-entity document, or a run "
                         "that failed before any test)", details=[str(err)] if err else None)
    results: list[DiagResult] = []
    for cat in cats:
        if not isinstance(cat, dict):
            continue
        category = str(cat.get("category") or "unknown")
        for test in cat.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3.1 writes null between tests
            name = str(test.get("name") or "unknown")
            for res in test.get("results") or []:
                if not isinstance(res, dict):
                    continue
                st = _status(str(res.get("status", "")))
                if st is None:
                    raise ParseError(f"{category}/{name}: unknown status {res.get('status')!r}")
                gpus = _gpu_list(res.get("gpu_ids", res.get("gpu_id")))
                if gpus is not None and len(gpus) > 1:
                    gpus = None if category == "Deployment" else gpus
                results.append(DiagResult(category, name, st[0], gpus, _texts(res.get("warnings")),
                                          _texts(res.get("info"))))
    if not results:
        raise ParseError("dcgmi diag -j output lists no test result")
    dev = root.get("GPU Device IDs") or doc.get("GPU Device IDs") or []
    return DiagReport("json", None, str(root["version"]) if root.get("version") is not None else None,
                      root.get("Driver Version Detected") or doc.get("Driver Version Detected"),
                      [str(d) for d in dev] if isinstance(dev, list) else [], results)


def _parse_text(text: str) -> DiagReport:
    level: int | None = None
    meta: dict[str, str] = {}
    category: str | None = None
    rows: list[list[Any]] = []  # [category, name, value-chunks]
    for raw in text.splitlines():
        line = raw.rstrip()
        if level is None and (m := _LEVEL.search(line)):
            level = int(m["level"])
        if m := _BAND.match(line):
            category = m["name"].strip()
            continue
        m = _ROW.match(line)
        if not m or category is None:
            continue
        name, cell = m["a"].strip(), m["b"]
        # A cell is one space, the wrapped chunk, padding: keep the chunk's own spaces (see module docstring).
        chunk = cell[1:] if cell.startswith(" ") else cell
        chunk = chunk[:-2] if chunk.endswith("  ") else chunk.rstrip()
        if name:
            rows.append([category, name, [chunk]])
        elif rows:
            rows[-1][2].append(chunk)
    results: list[DiagResult] = []
    for cat, name, chunks in rows:
        value = "".join(chunks).strip()
        if cat == "Metadata":
            meta[name] = value
            continue
        if name in ("Warning", "Info") and results:
            last = results[-1]
            (last.warnings if name == "Warning" else last.info).append(value)
            continue
        st = _status(value)
        if st is None:
            raise ParseError(f"{cat}/{name}: result {value!r} is not Pass, Fail, Warn or Skip")
        results.append(DiagResult(cat, name, st[0], st[1]))
    if not results:
        raise ParseError("no dcgmi diag result table (expected '| Diagnostic | Result |' rows under category "
                         "bands)", details=[text.strip()[:200]])
    devs = meta.get("GPU Device IDs Detected", "")
    return DiagReport("text", level, meta.get("DCGM Version"), meta.get("Driver Version Detected"),
                      [d.strip() for d in devs.split(",") if d.strip()], results)


def parse_dcgm_diag(text: str) -> DiagReport:
    """``dcgmi diag`` output, table or ``-j``; ParseError when it is neither."""
    stripped = text.lstrip()
    first_brace, first_table = text.find("{"), text.find("+---")
    if stripped.startswith("{") or (first_brace >= 0 and (first_table < 0 or first_brace < first_table)):
        return _parse_json(text)
    return _parse_text(text)


def gpus_named(result: DiagResult) -> list[int | None]:
    """The GPUs a failing result concerns: its own list, else those its warnings name, else the node (None)."""
    if result.gpus:
        return list(result.gpus)
    named = sorted({int(m["gpu"]) for w in result.warnings for m in _GPU_IN_TEXT.finditer(w)})
    return list(named) or [None]
