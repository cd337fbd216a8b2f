"""The validation report: one JSON document, a Markdown rendering of it, and the bandwidth plots."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpufleet.outdir import OutputDir, claim
from gpufleet.report.plot import plot_bandwidth
from gpufleet.validation.bench import BenchVerdict
from gpufleet.validation.gates import GIB
from gpufleet.validation.health import NodeHealth

REPORT_SCHEMA = 1


def build_report(stack: str, nodes: list[NodeHealth], bench: list[BenchVerdict] | None = None,
                 notes: list[str] | None = None, generated_at: str | None = None) -> dict[str, Any]:
    """The report's JSON document (``report.json``)."""
    bench = bench or []
    critical = [n.host for n in nodes if n.status == "critical"]
    failed = [v.label for v in bench if v.status in ("fail", "missing-size")]
    return {
        "schema": REPORT_SCHEMA,
        "stack": stack,
        "generated_at": generated_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": not critical and not failed,
        "summary": {"nodes": len(nodes), "critical": critical,
                    "warning": [n.host for n in nodes if n.status == "warning"],
                    "bench_failed": failed},
        "nodes": [n.to_json() for n in nodes],
        "bench": [v.to_json() for v in bench],
        "plots": [],
        "notes": list(notes or []),
    }


def _gbs(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _size(n: int | None) -> str:
    return "-" if n is None else (f"{n / GIB:g} GiB" if n >= GIB else f"{n} B")


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# gpufleet validation: {report['stack']}", "",
             f"Generated {report['generated_at']}. Verdict: **{'ready' if report['ok'] else 'NOT ready'}**.", "",
             "## Nodes", "",
             "| host | pool | status | GPUs | driver | loaded module | Xid events | action | taint | findings |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in report["nodes"]:
        findings = "<br>".join(f"{f['severity']}: {f['message']}" for f in n["findings"]) or "none"
        lines.append(f"| {n['host']} | {n['pool'] or '-'} | {n['status']} | {n['gpus'] or '-'} | {n['driver'] or '-'} "
                     f"| {n['loaded_module'] or '-'} | {n['xid_events']} | {n['action'] or '-'} | {n['taint'] or '-'} "
                     f"| {findings.replace('|', '/')} |")
    drains = [(n["host"], n["drain_reason"]) for n in report["nodes"] if n["drain_reason"]]
    if drains:
        lines += ["", "Slurm drain reasons:", ""]
        lines += [f"- `scontrol update nodename={h} state=drain reason=\"{r}\"`" for h, r in drains]
    if report["bench"]:
        lines += ["", "## nccl-tests", "",
                  "Gated on the out-of-place **busbw** of the largest message >= the gate's size; algbw is shown "
                  "next to it and never gated; the \"Avg bus bandwidth\" line is not used.", "",
                  "| run | collective | scope | ranks | size | busbw GB/s | algbw GB/s | gate GB/s | status | why |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for b in report["bench"]:
            gate = b["gate"]["busbw_gbs"] if b["gate"] else None
            lines.append(f"| {b['label']} | {b['collective']} | {b['scope']} | {b['nranks'] or '-'} "
                         f"| {_size(b['size_bytes'])} | {_gbs(b['busbw_gbs'])} | {_gbs(b['algbw_gbs'])} "
                         f"| {_gbs(gate)} | {b['status']} | {b['reason']} |")
        sources = {(b["gate"]["busbw_gbs"], b["gate"]["assumes"], b["gate"]["source"]) for b in report["bench"]
                   if b["gate"]}
        if sources:
            lines += ["", "Gate sources:", ""]
            lines += [f"- {g:g} GB/s ({assumes}): {src}" for g, assumes, src in sorted(sources)]
    for plot in report["plots"]:
        lines += ["", f"![{plot['title']}]({plot['file']})"]
    if report["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def write_report(out_dir: Path | OutputDir, stack: str, nodes: list[NodeHealth],
                 bench: list[BenchVerdict] | None = None, notes: list[str] | None = None) -> dict[str, Any]:
    """Write report.json, report.md and one busbw-<collective>-<scope>.png per group of runs into ``out_dir``
    (only files gpufleet wrote there are replaced: gpufleet.outdir)."""
    out = out_dir if isinstance(out_dir, OutputDir) else claim(out_dir, "--report")
    report = build_report(stack, nodes, bench, notes)
    groups: dict[tuple[str, str], list[BenchVerdict]] = defaultdict(list)
    for v in bench or []:
        groups[(v.collective, v.scope)].append(v)
    for (coll, scope), runs in sorted(groups.items()):
        name = f"busbw-{coll}-{scope}.png"
        title = f"{stack}: {coll} {scope}"
        plot_bandwidth(runs, out.target(name), title)
        report["plots"].append({"file": name, "title": title, "runs": [r.label for r in runs]})
    out.write_text("report.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    out.write_text("report.md", render_markdown(report))
    return report
