"""Validation report: JSON, Markdown and the bandwidth plot (checked on its data, not its pixels)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from gpufleet import REPO_ROOT
from gpufleet.catalog import get_gpu
from gpufleet.parsers.nccl import parse_nccl
from gpufleet.report import plot_bandwidth, render_markdown, write_report
from gpufleet.report.plot import SIZE_PX
from gpufleet.validation.bench import gate_result
from gpufleet.validation.health import Finding, NodeAction, NodeHealth

pytest.importorskip("matplotlib")
NCCL = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nccl-tests"
pytestmark = pytest.mark.skipif(not NCCL.is_dir(), reason=f"reference data {NCCL} is absent")
OCI = "h100-sxm-80gb_2x-oci-bm.gpu.h100.8-roce_nccl2.21.5_all_reduce_perf_1G-16G.txt"
GCP = "h100-80gb-hbm3_2x-gcp-a3-mega-tcpxo_16gpu_all_reduce_perf_8B-8G.txt"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def nodes() -> list[NodeHealth]:
    bad = NodeHealth("gpu-1", "gpu", gpus=8, driver="570.172.08", xid_events=1, findings=[
        Finding("xid-79", "critical", NodeAction.REBOOT, "GPU 3: Xid 79", 3, "00000000:1B:00.0", 79)])
    return [NodeHealth("gpu-0", "gpu", gpus=8, driver="570.172.08"), bad]


def test_plot_series_equals_parsed_rows(tmp_path: Path) -> None:
    model = get_gpu("h100-sxm5-80gb")
    runs = {name: parse_nccl((NCCL / name).read_text()) for name in (OCI, GCP)}
    verdicts = [gate_result(r, model, name.split("_")[1]) for name, r in runs.items()]
    data = plot_bandwidth(verdicts, tmp_path / "p.png", "test")
    assert png_size(data.path) == SIZE_PX
    for v, (_name, result) in zip(verdicts, runs.items(), strict=True):
        rows = [r for r in result.rows if r.out_of_place is not None]
        assert data.busbw[v.label] == ([float(r.size_bytes) for r in rows], [r.out_of_place.busbw_gbs for r in rows
                                                                            if r.out_of_place])
        assert data.algbw[v.label][1] == [r.out_of_place.algbw_gbs for r in rows if r.out_of_place]
    gate = model.gate("all_reduce", "multi-node")
    assert gate is not None and data.gate == (gate.busbw_gbs, float(gate.min_bytes))


def test_write_report(tmp_path: Path) -> None:
    model = get_gpu("h100-sxm5-80gb")
    result = parse_nccl((NCCL / OCI).read_text())
    verdicts = [gate_result(result, model, "pair-gpu-0-gpu-1"),
                gate_result(result, model, "pair-gpu-0-gpu-1:all_gather", collective="all_gather")]
    report = write_report(tmp_path, "local", nodes(), verdicts, ["a note"])
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == report and saved["ok"] is False
    assert saved["summary"] == {"nodes": 2, "critical": ["gpu-1"], "warning": [], "bench_failed": []}
    assert [p["file"] for p in saved["plots"]] == ["busbw-all_gather-multi-node.png", "busbw-all_reduce-multi-node.png"]
    for p in saved["plots"]:
        assert png_size(tmp_path / p["file"]) == SIZE_PX
    b = saved["bench"][0]
    assert (b["status"], b["size_bytes"], b["busbw_gbs"], b["algbw_gbs"]) == ("pass", 16 << 30, 464.57, 247.77)
    assert saved["bench"][1]["status"] == "no-gate"
    md = (tmp_path / "report.md").read_text()
    assert ("| gpu-1 | gpu | critical | 8 | 570.172.08 | - | 1 | reboot "
            "| gpufleet.io/gpu-unhealthy=reboot:NoExecute |") in md
    assert "| pair-gpu-0-gpu-1 | all_reduce | multi-node | 16 | 16 GiB | 464.57 | 247.77 | 350.00 | pass |" in md
    assert "scontrol update nodename=gpu-1 state=drain reason=\"gpufleet:reboot check=xid-79" in md
    assert "![local: all_reduce multi-node](busbw-all_reduce-multi-node.png)" in md
    assert "Gate sources:" in md and model.gate("all_reduce", "multi-node").source in md  # type: ignore[union-attr]


def test_markdown_without_bench() -> None:
    from gpufleet.report import build_report

    md = render_markdown(build_report("local", nodes()[:1], generated_at="2026-01-01T00:00:00+00:00"))
    assert "Verdict: **ready**" in md and "nccl-tests" not in md
