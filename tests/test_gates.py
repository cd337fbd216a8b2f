"""evaluate_busbw: pass, fail, missing-size, and corrupted data, on real logs and synthetic rows."""

from __future__ import annotations

import pytest

from gpufleet import REPO_ROOT
from gpufleet.parsers.nccl import Measurement, NcclResult, NcclRow, parse_nccl
from gpufleet.validation.gates import GIB, evaluate_busbw

NCCL_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nccl-tests"
needs_shared = pytest.mark.skipif(not NCCL_DIR.is_dir(), reason=f"reference data {NCCL_DIR} is absent")


def _load(name: str) -> NcclResult:
    return parse_nccl((NCCL_DIR / name).read_text())


H100_OCI = "h100-sxm-80gb_2x-oci-bm.gpu.h100.8-roce_nccl2.21.5_all_reduce_perf_1G-16G.txt"


@needs_shared
def test_pass_judged_on_largest_row_not_the_average() -> None:
    # Avg bus bandwidth is 458.452 (< 460): gating on it would fail a run that reaches 464.57 at 16 GiB.
    g = evaluate_busbw(_load(H100_OCI), gate_gbs=460)
    assert g.status == "pass" and g.passed
    assert (g.size_bytes, g.busbw_gbs, g.algbw_gbs) == (16 * GIB, 464.57, 247.77)
    assert g.busbw_by_size == {
        GIB: 446.28, 2 * GIB: 456.22, 4 * GIB: 461.83, 8 * GIB: 463.90, 16 * GIB: 464.57}
    assert g.reason == "busbw 464.57 GB/s at 16 GiB >= gate 460"


@needs_shared
def test_fail_below_gate() -> None:
    g = evaluate_busbw(_load("a100-sxm4-40gb_2x-oci-bm.gpu4.8_16gpu-roce_nccl2.26.5_all_reduce_perf_10G.txt"),
                       gate_gbs=225)
    assert g.status == "fail" and not g.passed
    assert (g.size_bytes, g.busbw_gbs, g.algbw_gbs) == (10 * GIB, 191.76, 102.27)
    assert g.reason == "busbw 191.76 GB/s at 10 GiB < gate 225"


@needs_shared
def test_missing_size_when_no_large_rows() -> None:
    log = "gh200-120gb_2node-8gpu-slingshot_nccl2.30.4_all_reduce_perf_int8_apptainer.txt"
    g = evaluate_busbw(_load(log), gate_gbs=100)
    assert g.status == "missing-size"
    assert (g.size_bytes, g.busbw_gbs, g.busbw_by_size) == (None, None, {})
    assert g.reason == ("no out-of-place result at >= 1 GiB (largest row: 134217728 B); "
                        "rerun with -e 8G or larger")


@needs_shared
def test_min_size_is_a_parameter() -> None:
    g = evaluate_busbw(_load(H100_OCI), gate_gbs=460, min_size_bytes=32 * GIB)
    assert g.status == "missing-size"
    g = evaluate_busbw(_load("a100-sxm4-80gb_1node-8gpu_nccl2.16.2_all_reduce_perf_32M-1G_gcm.txt"),
                       gate_gbs=225)
    assert (g.status, g.size_bytes, g.busbw_gbs) == ("pass", GIB, 231.72)


@needs_shared
def test_corrupted_data_fails_at_any_bandwidth() -> None:
    g = evaluate_busbw(
        _load("gh200-120gb_4node-16gpu-slingshot_nccl2.29.2_all_reduce_perf_int8_DATA-CORRUPTION-wrong-counts.txt"),
        gate_gbs=1.0, min_size_bytes=2 << 20)
    assert g.status == "fail"
    assert g.reason.startswith("data validation failed (2097152 B: 27743 wrong, 4194304 B: 221159 wrong")


def _row(size: int, busbw: float, wrong: int | None = 0) -> NcclRow:
    m = Measurement(time_us=1.0, algbw_gbs=busbw / 2, busbw_gbs=busbw, wrong=wrong)
    return NcclRow(size_bytes=size, count=size // 4, type="float", redop="sum", out_of_place=m, in_place=m)


def test_out_of_bounds_fails_and_unchecked_rows_do_not() -> None:
    rows = [_row(GIB, 470.0, wrong=None), _row(8 * GIB, 480.0, wrong=None)]
    ok = NcclResult("all_reduce", 8, rows, 300.0, 0, [])
    assert evaluate_busbw(ok, 460).status == "pass"
    bad = NcclResult("all_reduce", 8, rows, 300.0, 2, [])
    g = evaluate_busbw(bad, 460)
    assert (g.status, g.reason) == ("fail", "2 out-of-bounds values reported")


def test_exactly_at_gate_passes_and_just_below_fails() -> None:
    res = NcclResult("all_reduce", 8, [_row(16 * GIB, 431.0)], None, None, [])
    assert evaluate_busbw(res, 431.0).status == "pass"
    assert evaluate_busbw(res, 431.01).status == "fail"
