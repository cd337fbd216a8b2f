"""Prometheus textfile of the drift report, and fleet skew across hosts of one pool."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.ansible_run import RunResult
from gpufleet.drift import DriftItem, DriftReport, collect_versions, find_skew, render_textfile, write_textfile
from gpufleet.lock import load_lock


def _report(errors: list[str] | None = None) -> DriftReport:
    return DriftReport(
        hosts=["gpu-0", "gpu-1"],
        components={"gpu-0": ["nvidia_driver", "gpu_settings"], "gpu-1": ["nvidia_driver", "gpu_settings"]},
        items=[DriftItem("gpu-0", "gpu_settings", "gpu_setting", "t", "GPU3 power limit 500 W, expected 700 W")],
        errors=errors or [],
        failed_hosts=[e.split(":", 1)[0] for e in errors or []],
    )


def test_textfile_has_one_series_per_host_and_component_and_the_run_time() -> None:
    text = render_textfile(_report(), stack="local", now=1700000000.5)
    series = [ln for ln in text.splitlines() if ln.startswith("gpufleet_drift{")]
    assert series == [
        'gpufleet_drift{stack="local",host="gpu-0",component="nvidia_driver",severity="normal"} 0',
        'gpufleet_drift{stack="local",host="gpu-0",component="nvidia_driver",severity="security"} 0',
        'gpufleet_drift{stack="local",host="gpu-0",component="gpu_settings",severity="normal"} 1',
        'gpufleet_drift{stack="local",host="gpu-0",component="gpu_settings",severity="security"} 0',
        'gpufleet_drift{stack="local",host="gpu-1",component="nvidia_driver",severity="normal"} 0',
        'gpufleet_drift{stack="local",host="gpu-1",component="nvidia_driver",severity="security"} 0',
        'gpufleet_drift{stack="local",host="gpu-1",component="gpu_settings",severity="normal"} 0',
        'gpufleet_drift{stack="local",host="gpu-1",component="gpu_settings",severity="security"} 0',
    ]
    assert 'gpufleet_drift_last_run_timestamp_seconds{stack="local"} 1700000000.500' in text
    assert "# TYPE gpufleet_drift gauge" in text and text.endswith("\n")


def test_a_host_whose_check_failed_reports_an_error_not_a_guess() -> None:
    text = render_textfile(_report(["gpu-1: nvidia_driver : Install: boom"]), stack="s", now=0)
    assert 'host="gpu-1",component' not in text
    assert 'gpufleet_drift_check_error{stack="s",host="gpu-1"} 1' in text
    assert 'gpufleet_drift_check_error{stack="s",host="gpu-0"} 0' in text


def test_textfile_write_is_atomic_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "tc" / "gpufleet_drift.prom"
    write_textfile(path, "a 1\n")
    write_textfile(path, "a 2\n")
    assert path.read_text() == "a 2\n"
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert [p.name for p in path.parent.iterdir()] == ["gpufleet_drift.prom"]


def test_skew_reports_differences_within_a_pool_pinned_or_not() -> None:
    base = {"pool": "gpu", "kernel": "6.1.0-28-amd64", "driver_loaded": "570.172.08",
            "driver_installed": "570.172.08-0ubuntu1", "nccl": "2.26.2-1+cuda12.8", "vbios": "96.00.AF.00.01"}
    # What skew.yml's set_stats (per_host: false, aggregate: true) leaves in playbook_on_stats' artifact_data.
    result = RunResult(custom_stats={"gpufleet_skew": {
        "gpu-0": base,
        "gpu-1": base | {"driver_installed": "570.133.20-0ubuntu1", "vbios": "96.00.89.00.01"},
        "gpu-2": base,
        "cpu-0": base | {"pool": "cpu", "kernel": "6.1.0-30-amd64"},
    }})
    versions = collect_versions(result)
    assert set(versions) == {"gpu-0", "gpu-1", "gpu-2", "cpu-0"}
    _, lock = load_lock("local")
    skew = find_skew(versions, lock)
    assert [(s.pool, s.item) for s in skew] == [("gpu", "driver_installed"), ("gpu", "vbios")]
    driver, vbios = skew
    assert driver.values == {"570.172.08-0ubuntu1": ["gpu-0", "gpu-2"], "570.133.20-0ubuntu1": ["gpu-1"]}
    assert driver.line() == ("pool gpu driver (installed): 570.172.08-0ubuntu1 on gpu-0, gpu-2; "
                             "570.133.20-0ubuntu1 on gpu-1 (locked 570.172.08)")
    assert vbios.locked is None and vbios.line().endswith("(not pinned by the lock)")
