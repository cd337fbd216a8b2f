"""``gpufleet inspect``: parse saved tool output offline (``nvidia-smi -q -x``, ``topo -m``, ``nvlink -s``,
nccl-tests logs, ``dcgmi diag``, NVMe SMART, ``ibnetdiscover``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.contract import contract, parse_failure, print_json
from gpufleet.errors import InputError
from gpufleet.inputs import iter_lines, read_text
from gpufleet.parsers import ParseError
from gpufleet.parsers.ibnetdiscover import parse_ibnetdiscover_lines
from gpufleet.parsers.nccl import parse_nccl_lines
from gpufleet.parsers.smi_xml import parse_smi_xml
from gpufleet.topology import parse_nvlink_status, parse_topo_m
from gpufleet.validation.dcgm_diag import parse_dcgm_diag
from gpufleet.validation.fio import FioGate, FioResult, gate_fio, parse_fio
from gpufleet.validation.health import check_dcgm_diag, check_smart
from gpufleet.validation.mdtest import MdtestGate, gate_mdtest, parse_mdtest
from gpufleet.validation.smart import parse_smart

app = typer.Typer(help="Parse saved tool output offline.", no_args_is_help=True, add_completion=False)

# Existence and type are checked by gpufleet.inputs, so a missing file is the contract's error (exit 1).
FileArg = Annotated[Path, typer.Argument(help="saved output")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON to stdout instead of a table")]


T = TypeVar("T")
G = TypeVar("G")


def _parsed(file: Path, parse: Callable[[str], T], kind: str = "log") -> T:
    """The file read within the input limits and parsed; a parse error is the contract's parse error (exit 1)."""
    try:
        return parse(read_text(file, kind))
    except ParseError as e:
        raise parse_failure(str(file), e) from None


def _gates(file: Path, build: Callable[[], list[G]]) -> list[G]:
    """The ``--min-*`` gates ``build`` makes; a gate refusing its value (not finite, not positive) is the contract's
    option error, named against the file it gates."""
    try:
        return build()
    except ValueError as e:
        raise InputError.one(str(file), str(e), "give gates as finite positive numbers", key="--min-*",
                             kind="invalid option") from None


def _show(value: Any) -> str:
    return "-" if value is None else str(value)


@app.command("smi-xml")
@contract
def smi_xml(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse ``nvidia-smi -q -x`` output."""
    report = _parsed(file, parse_smi_xml, "xml")
    if as_json:
        print_json(report.to_dict())
        return
    table = Table(title=f"driver {_show(report.driver_version)}, CUDA {_show(report.cuda_version)}")
    for col in ("#", "name", "bus id", "persist", "MIG", "power W (limit/default)", "ECC", "DBE vol",
                "remap pending/fail", "PCIe gen/width", "temp C", "throttle"):
        table.add_column(col)
    for g in report.gpus:
        rows = g.remapped_rows
        table.add_row(
            str(g.index), _show(g.name), _show(g.pci_bus_id), _show(g.persistence_mode), _show(g.mig_mode),
            f"{_show(g.power_limit_w)}/{_show(g.power_default_w)}", _show(g.ecc_mode),
            _show(g.ecc_dbe_volatile),
            "-" if rows is None else f"{_show(rows.pending)}/{_show(rows.failure)}",
            f"{_show(g.pcie_gen_current)}/{_show(g.pcie_gen_max)} x{_show(g.pcie_width_current)}"
            f"/{_show(g.pcie_width_max)}",
            _show(g.temperature_c), ", ".join(g.throttle_reasons or []) or "-",
        )
    Console().print(table)


@app.command("nccl")
@contract
def nccl(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse an nccl-tests log (text, or the file ``-J`` writes)."""
    try:
        result = parse_nccl_lines(iter_lines(file, "log"))
    except ParseError as e:
        raise parse_failure(str(file), e) from None
    if as_json:
        print_json(result.to_dict())
        return
    table = Table(title=f"{_show(result.collective)}, {_show(result.nranks)} ranks")
    for col in ("size B", "type", "oop time us", "oop algbw", "oop busbw", "oop wrong",
                "ip algbw", "ip busbw", "ip wrong"):
        table.add_column(col, justify="right")
    for r in result.rows:
        o, i = r.out_of_place, r.in_place
        table.add_row(
            str(r.size_bytes), r.type,
            *(("-",) * 4 if o is None else (f"{o.time_us:g}", f"{o.algbw_gbs:g}", f"{o.busbw_gbs:g}",
                                             _show(o.wrong))),
            *(("-",) * 3 if i is None else (f"{i.algbw_gbs:g}", f"{i.busbw_gbs:g}", _show(i.wrong))),
        )
    console = Console()
    console.print(table)
    console.print(f"avg busbw (all sizes; not a gate): {_show(result.avg_busbw_gbs)} GB/s, "
                  f"out of bounds: {_show(result.out_of_bounds)}, wrong elements: {result.wrong_total}")


@app.command("ibnetdiscover")
@contract
def ibnetdiscover(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse ``ibnetdiscover`` output: switches, their GUIDs, the hosts whose HCAs hang off each, the uplinks."""
    try:
        fabric = parse_ibnetdiscover_lines(iter_lines(file, "log"))
    except ParseError as e:
        raise parse_failure(str(file), e) from None
    data = fabric.to_dict()
    if as_json:
        print_json(data)
        return
    table = Table(title=f"{len(data['switches'])} switches, {data['leaf_switches']} with HCAs, "
                        f"{len(data['hosts'])} hosts")
    for col in ("switch GUID", "lid", "level", "hosts", "switch links (cables)"):
        table.add_column(col)
    for s in data["switches"]:
        table.add_row(s["guid"], _show(s["lid"]), s["level"], ", ".join(s["hosts"]) or "-",
                      ", ".join(f"{g}:{n}" for g, n in s["switch_links"].items()) or "-")
    Console().print(table)


@app.command("topo")
@contract
def topo(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse ``nvidia-smi topo -m`` output: per GPU its NUMA node, CPU affinity, NVLink peers and nearest NICs."""
    model = _parsed(file, parse_topo_m)
    data = model.to_dict()
    if as_json:
        print_json(data)
        return
    table = Table(title=f"{model.gpu_count} GPUs, {len(model.nic_labels)} NICs "
                        f"(nearest = best of {' < '.join(('PIX', 'PXB', 'PHB', 'NODE', 'SYS'))})")
    for col in ("GPU", "NUMA", "CPU affinity", "NVLink peers (links)", "nearest NICs"):
        table.add_column(col)
    for g in data["gpus"]:
        peers = ", ".join(f"{k}:{v}" for k, v in g["nvlink"].items()) or "-"
        table.add_row(str(g["index"]), _show(g["numa_node"]), _show(g["cpu_affinity"]), peers,
                      ", ".join(g["nearest_nics"]) or "-")
    console = Console()
    console.print(table)
    for nic in data["nics"]:
        console.print(f"{nic['name']}: nearest GPUs {', '.join(map(str, nic['nearest_gpus'])) or '-'}")


@app.command("nvlink")
@contract
def nvlink(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse ``nvidia-smi nvlink -s``: active links and their speed per GPU."""
    gpus = _parsed(file, parse_nvlink_status)
    data = [{"index": g.index, "name": g.name, "uuid": g.uuid, "active_links": g.active_links,
             "links": {str(k): v for k, v in g.links.items()}, "inactive": list(g.inactive), "note": g.note}
            for g in gpus]
    if as_json:
        print_json({"gpus": data})
        return
    table = Table(title="nvidia-smi nvlink -s")
    for col in ("GPU", "name", "active links", "GB/s per link", "note"):
        table.add_column(col)
    for g in gpus:
        speeds = sorted(set(g.links.values()))
        table.add_row(str(g.index), g.name, str(g.active_links), ", ".join(f"{s:g}" for s in speeds) or "-",
                      g.note or "-")
    Console().print(table)


@app.command("dcgm-diag")
@contract
def dcgm_diag(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse ``dcgmi diag -r N`` output (table or ``-j`` JSON) and the findings validate makes of it."""
    report = _parsed(file, parse_dcgm_diag)
    findings = check_dcgm_diag(report)
    if as_json:
        print_json({**report.to_dict(), "findings": [f.to_json() for f in findings]})
        return
    table = Table(title=f"dcgmi diag (DCGM {_show(report.dcgm_version)}, driver {_show(report.driver_version)}, "
                        f"level {_show(report.level)})")
    for col in ("category", "test", "status", "GPUs", "warnings"):
        table.add_column(col)
    for r in report.results:
        table.add_row(r.category, r.test, r.status, "all" if r.gpus is None else ",".join(map(str, r.gpus)),
                      str(len(r.warnings)))
    console = Console()
    console.print(table)
    for f in findings:
        if f.severity != "info":
            console.print(f"{f.severity} {f.check} -> {f.action.value}: {f.message}")


@app.command("nvme-smart")
@contract
def nvme_smart(file: FileArg, as_json: JsonOpt = False) -> None:
    """Parse one NVMe drive's ``smartctl --json`` or ``nvme smart-log -o json`` output and its findings."""
    report = _parsed(file, parse_smart)
    findings = check_smart(report)
    if as_json:
        print_json({**report.to_dict(), "findings": [f.to_json() for f in findings]})
        return
    console = Console()
    console.print(f"{_show(report.device)} {_show(report.model)}: critical_warning=0x{report.critical_warning:02x}, "
                  f"spare {report.available_spare_pct}% (threshold {report.spare_threshold_pct}%), "
                  f"used {report.percentage_used}%, media errors {report.media_errors}")
    for f in findings:
        console.print(f"{f.severity} {f.check} -> {f.action.value}: {f.message}")


@app.command("fio")
@contract
def fio(
    files: Annotated[list[Path], typer.Argument(
        help="saved output; several files (one per node of a run on all nodes at once) are gated on their sum")],
    as_json: JsonOpt = False,
    min_read_mbps: Annotated[float | None, typer.Option(help="Gate: summed read MB/s (10^6 B/s).")] = None,
    min_write_mbps: Annotated[float | None, typer.Option(help="Gate: summed write MB/s (10^6 B/s).")] = None,
    min_read_iops: Annotated[float | None, typer.Option(help="Gate: summed read IOPS.")] = None,
    min_write_iops: Annotated[float | None, typer.Option(help="Gate: summed write IOPS.")] = None,
) -> None:
    """Parse fio ``--output-format=json`` output (also ``json,normal``); with gates, exit 1 when one fails."""
    parsed = [_parsed(f, parse_fio) for f in files]
    result = FioResult(parsed[0].version, [j for r in parsed for j in r.jobs])
    gates = _gates(files[0], lambda: [
        FioGate(direction, None if mbps is None else mbps * 1e6, iops)  # type: ignore[arg-type]
        for direction, mbps, iops in (("read", min_read_mbps, min_read_iops), ("write", min_write_mbps, min_write_iops))
        if mbps is not None or iops is not None])
    verdicts = [gate_fio(result, g) for g in gates]
    if as_json:
        print_json({**result.to_dict(), "gates": [v.to_json() for v in verdicts]})
    else:
        table = Table(title=f"fio {_show(result.version)}")
        for col in ("job", "rw", "read MB/s", "read IOPS", "write MB/s", "write IOPS", "p99 clat us (r/w)"):
            table.add_column(col)
        for j in result.jobs:
            r, w = j.read, j.write
            table.add_row(j.name, _show(j.rw), f"{r.bw_bytes / 1e6:.1f}" if r else "-", f"{r.iops:.0f}" if r else "-",
                          f"{w.bw_bytes / 1e6:.1f}" if w else "-", f"{w.iops:.0f}" if w else "-",
                          "/".join("-" if s is None or s.clat_p99_ns is None else f"{s.clat_p99_ns / 1e3:.0f}"
                                   for s in (r, w)))
        console = Console()
        console.print(table)
        for v in verdicts:
            console.print(f"gate {v.direction}: {v.status} ({v.reason})")
    if any(v.status != "pass" for v in verdicts):
        raise typer.Exit(1)


@app.command("mdtest")
@contract
def mdtest(
    file: FileArg, as_json: JsonOpt = False,
    min_creates: Annotated[float | None, typer.Option(help="Gate: mean file creates per second.")] = None,
    min_stats: Annotated[float | None, typer.Option(help="Gate: mean file stats per second.")] = None,
) -> None:
    """Parse mdtest's output (its SUMMARY rate table); with gates, exit 1 when one fails or has no data."""
    result = _parsed(file, parse_mdtest)
    gates = _gates(file, lambda: [g for g in (None if min_creates is None else MdtestGate("creates", min_creates),
                                              None if min_stats is None else MdtestGate("stats", min_stats))
                                  if g is not None])
    verdicts = [gate_mdtest(result, g) for g in gates]
    if as_json:
        print_json({**result.to_dict(), "gates": [v.to_json() for v in verdicts]})
    else:
        table = Table(title=f"mdtest {_show(result.version)}: {_show(result.tasks)} tasks on "
                            f"{_show(result.nodes)} nodes, {result.iterations} iterations (ops/s)")
        for col in ("operation", "max", "min", "mean", "std dev"):
            table.add_column(col)
        for r in result.rates:
            table.add_row(r.operation, *(_show(v) for v in (r.max, r.min, r.mean, r.stddev)))
        console = Console()
        console.print(table)
        for v in verdicts:
            console.print(f"gate {v.metric}: {v.status} ({v.reason})")
    if any(v.status != "pass" for v in verdicts):
        raise typer.Exit(1)
