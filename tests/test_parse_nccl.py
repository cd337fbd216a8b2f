"""parse_nccl on every real nccl-tests log in ../shared, plus the JSON (-J) format and edge cases."""

from __future__ import annotations

import json

import pytest

from gpufleet import REPO_ROOT
from gpufleet.parsers import ParseError
from gpufleet.parsers.nccl import parse_nccl

NCCL_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nccl-tests"
FILES = sorted(p.name for p in NCCL_DIR.iterdir()) if NCCL_DIR.is_dir() else []
needs_shared = pytest.mark.skipif(not NCCL_DIR.is_dir(), reason=f"reference data {NCCL_DIR} is absent")

# file -> (collective, nranks, rows, avg, out_of_bounds, last row: size, oop busbw, oop algbw, ip busbw)
OK: dict[str, tuple[str | None, int | None, int, float | None, int | None, int, float, float, float]] = {
    "a100-sxm4-40gb_1x-oci-bm.gpu4.8_8gpu_nccl2.26.5_all_reduce_perf_10G.txt":
        ("all_reduce", 8, 1, 232.167, 0, 10737418240, 232.20, 132.69, 232.13),
    "a100-sxm4-40gb_1x-oci-bm.gpu4.8_8gpu_ngc-tf25.02_nccl2.25.1_all_reduce_perf_10G.txt":
        ("all_reduce", 8, 1, 233.168, 0, 10737418240, 233.00, 133.14, 233.34),
    "a100-sxm4-40gb_2x-oci-bm.gpu4.8_16gpu-roce-32ports_older-nccl-tests_all_reduce_perf_10G.txt":
        ("all_reduce", 16, 1, 220.921, 0, 10737418240, 222.88, 118.87, 218.96),
    "a100-sxm4-40gb_2x-oci-bm.gpu4.8_16gpu-roce_nccl2.26.5_all_reduce_perf_10G.txt":
        ("all_reduce", 16, 1, 191.752, 0, 10737418240, 191.76, 102.27, 191.75),
    "a100-sxm4-80gb_1node-8gpu_nccl2.16.2_all_reduce_perf_32M-1G_gcm.txt":
        (None, 8, 6, 210.99, 0, 1073741824, 231.72, 132.41, 231.70),
    "a100-sxm4-80gb_2node-16gpu-pairwise_nccl2.12.12_all_reduce_perf_32M-1G_gcm.txt":
        (None, 16, 6, 150.209, 0, 1073741824, 182.80, 97.50, 181.39),
    "a100-sxm4-80gb_2x-p4de-efa_all_reduce_perf_PARTIAL-table-only.txt":
        (None, None, 29, None, None, 2147483648, 78.33, 41.78, 78.33),
    "gh200-120gb_2node-8gpu-slingshot_nccl2.30.4_all_reduce_perf_int8_apptainer.txt":
        ("all_reduce", 8, 28, 17.8617, 0, 134217728, 101.70, 58.12, 107.63),
    "gh200-120gb_4node-16gpu-slingshot_nccl2.29.2_all_reduce_perf_int8_DATA-CORRUPTION-wrong-counts.txt":
        ("all_reduce", 16, 28, None, None, 134217728, 89.85, 47.92, 83.23),
    "h100-80gb-hbm3_2x-gcp-a3-mega-tcpxo_16gpu_all_reduce_perf_8B-8G.txt":
        (None, 16, 31, 70.742, 0, 8589934592, 338.82, 180.71, 337.35),
    "h100-sxm-80gb_2x-oci-bm.gpu.h100.8-roce_nccl2.21.5_all_reduce_perf_1G-16G.txt":
        ("all_reduce", 16, 5, 458.452, 0, 17179869184, 464.57, 247.77, 464.79),
    "h100-sxm_2x-p5-efa-eks_all_reduce_perf_EXCERPT.txt":
        (None, None, 7, 52.9753, 0, 2147483648, 437.79, 233.49, 437.89),
    "h100-sxm_2x-p5-efa_all_reduce_perf_PARTIAL-table-only.txt":
        (None, None, 32, None, None, 17179869184, 487.09, 259.78, 487.26),
    "h100-sxm_p5-awsbatch_all_reduce_perf_table-and-avg.txt":
        (None, None, 32, 156.742, 0, 17179869184, 483.05, 276.03, 483.35),
    "h200_p5en_all_reduce_perf_EXCERPT.txt":
        (None, None, 3, 84.0569, 0, 17179869184, 369.86, 186.39, 369.42),
}
FAILED: dict[str, list[str]] = {
    "h100-sxm_x8_driver560.35.03_all_reduce_perf_FAIL-cuda-system-not-yet-initialized.txt": [
        "test: Test CUDA failure common.cu:941 'system not yet initialized'",
        ".. test pid 54340: Test failure common.cu:891",
    ],
    "openmpi_not-enough-slots_failure_gcm.txt": [
        "There are not enough slots available in the system to satisfy the 16",
    ],
}


@needs_shared
def test_every_log_is_covered() -> None:
    assert set(FILES) == set(OK) | set(FAILED)


@needs_shared
@pytest.mark.parametrize("name", sorted(OK))
def test_real_log(name: str) -> None:
    coll, nranks, nrows, avg, oob, size, busbw, algbw, ip_busbw = OK[name]
    result = parse_nccl((NCCL_DIR / name).read_text())
    d = result.to_dict()
    assert list(d) == ["collective", "nranks", "rows", "avg_busbw_gbs", "out_of_bounds", "devices"]
    assert (d["collective"], d["nranks"], len(d["rows"]), d["avg_busbw_gbs"], d["out_of_bounds"]) == (
        coll, nranks, nrows, avg, oob)
    last = d["rows"][-1]
    assert list(last) == ["size_bytes", "count", "type", "redop", "out_of_place", "in_place"]
    assert last["size_bytes"] == size
    assert last["out_of_place"]["busbw_gbs"] == busbw
    assert last["out_of_place"]["algbw_gbs"] == algbw
    assert last["in_place"]["busbw_gbs"] == ip_busbw
    assert last["redop"] == "sum"
    assert len(d["devices"]) == (nranks or 0)
    sizes = [r["size_bytes"] for r in d["rows"]]
    assert sizes == sorted(sizes)


@needs_shared
def test_multi_node_devices() -> None:
    name = "h100-sxm-80gb_2x-oci-bm.gpu.h100.8-roce_nccl2.21.5_all_reduce_perf_1G-16G.txt"
    devices = parse_nccl((NCCL_DIR / name).read_text()).to_dict()["devices"]
    assert devices[0] == {"rank": 0, "host": "inst-xxxxx-h100-ol89", "device": 0,
                          "name": "NVIDIA H100 80GB HBM3"}
    assert devices[15] == {"rank": 15, "host": "inst-yyyyy-h100-ol89", "device": 7,
                           "name": "NVIDIA H100 80GB HBM3"}
    assert sorted({d["host"] for d in devices}) == ["inst-xxxxx-h100-ol89", "inst-yyyyy-h100-ol89"]


@needs_shared
def test_data_corruption_is_surfaced() -> None:
    name = ("gh200-120gb_4node-16gpu-slingshot_nccl2.29.2_all_reduce_perf_int8_"
            "DATA-CORRUPTION-wrong-counts.txt")
    result = parse_nccl((NCCL_DIR / name).read_text())
    by_size = {r.size_bytes: r for r in result.rows}
    assert by_size[2097152].out_of_place is not None and by_size[2097152].out_of_place.wrong == 18134
    assert by_size[2097152].in_place is not None and by_size[2097152].in_place.wrong == 9609
    assert by_size[8388608].out_of_place is not None and by_size[8388608].out_of_place.wrong == 763876
    assert by_size[67108864].in_place is not None and by_size[67108864].in_place.wrong == 0
    assert by_size[1048576].out_of_place is not None and by_size[1048576].out_of_place.wrong == 0
    assert result.wrong_total == 18134 + 9609 + 96817 + 124342 + 763876 + 530181 + 404221 + 103664 + \
        951005 + 820604 + 113492
    # The log was cut before the summary lines: those stay unknown rather than reading as "0 OK".
    assert result.out_of_bounds is None and result.avg_busbw_gbs is None


@needs_shared
@pytest.mark.parametrize("name", sorted(FAILED))
def test_failed_run_raises_with_the_reason(name: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_nccl((NCCL_DIR / name).read_text())
    assert info.value.details == FAILED[name]
    assert str(info.value).startswith("nccl-tests run failed\n")


def test_na_wrong_column_and_prefixes_and_exponent_counts() -> None:
    text = "\n".join([
        "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong"
        "     time   algbw   busbw #wrong",
        "[1,0]<stdout>:  8589934592    2147483648     float     sum      -1    34719  247.41  463.90    N/A"
        "    34720  247.41  463.89    N/A",
        "[1,0]<stdout>: 17179869184    4294967296     float     sum      -1    69338  247.77  464.57"
        "  1.23457e+06    69305  247.89  464.79      0",
        "[1,0]<stdout>:# Out of bounds values : 3 FAILED",
        "[1,0]<stdout>:# Avg bus bandwidth    : 464.2 ",
    ])
    result = parse_nccl(text)
    first, last = result.rows
    assert first.out_of_place is not None and first.out_of_place.wrong is None
    assert first.in_place is not None and first.in_place.wrong is None
    assert last.out_of_place is not None and last.out_of_place.wrong == 1234570
    assert (result.out_of_bounds, result.avg_busbw_gbs) == (3, 464.2)


def test_per_iteration_columns_are_skipped() -> None:
    header = ("#       size         count      type   redop    root     time   algbw   busbw #wrong"
              "   i_min   i_max   i_p99   i_cv%     time   algbw   busbw #wrong"
              "   i_min   i_max   i_p99   i_cv%")
    row = ("  1073741824     268435456     float     sum      -1   4511.2  238.02  446.28      0"
           "  4400.1  4600.2  4590.0    1.20   4520.9  237.50  445.32      0  4401.0  4610.0  4600.0    1.30")
    [r] = parse_nccl(header + "\n" + row + "\n").rows
    assert r.out_of_place is not None and r.in_place is not None
    assert (r.out_of_place.busbw_gbs, r.in_place.time_us, r.in_place.busbw_gbs) == (446.28, 4520.9, 445.32)


def test_json_output_file() -> None:
    doc = {
        "version": 2, "args": ["./build/all_gather_perf", "-b", "1G", "-e", "8G", "-J", "out.json"],
        "config": {"nthreads": 1, "ngpus": 1, "devices": [
            {"rank": 0, "group": 0, "pid": 1, "hostname": "gpu-a-0", "device": 0, "device_hex": "0000:18:00",
             "device_info": "NVIDIA H100 80GB HBM3"},
            {"rank": 1, "group": 0, "pid": 2, "hostname": "gpu-a-0", "device": 1, "device_hex": "0000:2a:00",
             "device_info": "NVIDIA H100 80GB HBM3"}]},
        "results": [
            {"size": 8589934592, "count": 1073741824, "type": "float", "redop": "none", "root": "    -1",
             "out_of_place": {"time": 20000.5, "alg_bw": 429.5, "bus_bw": 214.75, "nwrong": 0},
             "in_place": {"time": 19999.0, "alg_bw": 429.53, "bus_bw": 214.77, "nwrong": None},
             "actual_iterations": 20, "experiment_name": "AllGather"}],
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 214.76, "okay": "unchecked"},
        "errors": [],
    }
    d = parse_nccl(json.dumps(doc)).to_dict()
    assert d["collective"] == "all_gather"
    assert d["nranks"] == 2
    assert d["devices"][1] == {"rank": 1, "host": "gpu-a-0", "device": 1, "name": "NVIDIA H100 80GB HBM3"}
    assert d["rows"][0]["out_of_place"] == {"time_us": 20000.5, "algbw_gbs": 429.5, "busbw_gbs": 214.75,
                                            "wrong": 0}
    assert d["rows"][0]["in_place"]["wrong"] is None
    assert (d["avg_busbw_gbs"], d["out_of_bounds"]) == (214.76, 0)


def test_json_with_errors_raises() -> None:
    doc = {"version": 2, "results": [], "errors": ["NCCL WARN NET/IB : Got completion with error 12"]}
    with pytest.raises(ParseError, match="Got completion with error 12"):
        parse_nccl(json.dumps(doc))


def test_no_rows_is_an_error() -> None:
    with pytest.raises(ParseError, match="no nccl-tests result rows found"):
        parse_nccl("# nThread 1 nGpus 1 minBytes 8 maxBytes 128\n#\n# Using devices\n")
