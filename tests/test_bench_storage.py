"""``gpufleet bench storage``: targets, thresholds from the catalogs, the rendered fio/sbatch/Job files, the
error contract; ``gpufleet inspect fio`` summing the files of several nodes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.catalog.clouds import AWS, AZURE, GCP
from gpufleet.catalog.storage import DATA_FILE, load_storage, storage_catalog
from gpufleet.cli import app
from gpufleet.validation.bench import validate_manifest

STACKS = Path(__file__).resolve().parents[1] / "stacks"
FIO = Path(__file__).parent / "fixtures" / "fio" / "cbt-rawfio_nvme8n13_fio-3.42_randwrite-4k-qd1_json+normal.txt"


def _run(tmp_path: Path, stack: str) -> dict[str, Any]:
    r = CliRunner().invoke(app, ["bench", "storage", "--stack", stack, "--out", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    data: dict[str, Any] = json.loads(r.stdout)
    return data


def _targets(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in data["targets"]}


def test_onprem_scratch_and_lustre(tmp_path: Path) -> None:
    data = _run(tmp_path, "onprem-h100")
    t = _targets(data)
    assert sorted(t) == ["checkpoints", "datasets", "scratch"]
    cat = storage_catalog()
    cls = cat.nvme.classes[cat.nvme.default_class]
    f = cat.nvme.gate_fraction
    # No devices listed: gated as one drive of the default class.
    assert t["scratch"]["gates"]["read_mbps"]["value"] == pytest.approx(f * cls.seq_read_mbps)
    assert t["scratch"]["gates"]["write_mbps"]["value"] == pytest.approx(f * cls.seq_write_mbps)
    assert t["scratch"]["gates"]["read_iops"]["value"] == pytest.approx(f * cls.rand_read_iops)
    assert cls.source in t["scratch"]["gates"]["read_mbps"]["source"]
    # On-prem Lustre: the stack's declared tier x capacity (1 PiB at 250 MB/s/TiB).
    assert t["datasets"]["gates"]["read_mbps"]["value"] == pytest.approx(cat.lustre.gate_fraction * 250 * 1024)
    assert "declared in the stack" in t["datasets"]["gates"]["read_mbps"]["source"]
    assert t["datasets"]["gates"]["creates_per_s"]["value"] is None
    out = tmp_path / "out"
    jobs = {j["job"]: j for j in data["jobs"]}
    assert sorted(jobs) == sorted(["storage-scratch-gpu-a-0", "storage-scratch-gpu-a-1", "storage-scratch-gpu-b-0",
                                   "storage-scratch-gpu-b-1", "storage-datasets-h100-a", "storage-checkpoints-h100-a",
                                   "storage-datasets-h100-b", "storage-checkpoints-h100-b"])
    fio = (out / "fio" / "h100-a" / "scratch.fio").read_text()
    for section in ("[seq-write]", "[seq-read]", "[rand-read]", "[parallel-read]"):
        assert section in fio
    assert "bs=4k" in fio and "numjobs=8" in fio and "directory=/scratch/gpufleet-bench/${GPUFLEET_NODE}" in fio
    sbatch = (out / "slurm" / "storage-checkpoints-h100-a.sbatch").read_text()
    assert "#SBATCH --nodelist=gpu-a-0,gpu-a-1" in sbatch and "mdtest -F -C -T -r" in sbatch
    assert "mdtest" not in (out / "slurm" / "storage-scratch-gpu-a-0.sbatch").read_text()
    # Kubernetes mounts the datasets claim read-only: no Job for it, and the plan says why.
    assert not (out / "kubernetes" / "storage-datasets-h100-a.yaml").exists()
    assert "read-only" in jobs["storage-datasets-h100-a"]["kubernetes"]
    ckpt = yaml.safe_load((out / "kubernetes" / "storage-checkpoints-h100-a.yaml").read_text())
    assert ckpt["spec"]["completions"] == 2 and ckpt["spec"]["completionMode"] == "Indexed"
    assert ckpt["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "checkpoints"
    scratch = yaml.safe_load((out / "kubernetes" / "storage-scratch-gpu-a-0.yaml").read_text())
    assert scratch["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] == "/scratch"
    for m in (ckpt, scratch):
        assert validate_manifest(m) == []
        # The container's script and the sbatch scripts are valid bash.
        script = m["spec"]["template"]["spec"]["containers"][0]["command"][2]
        assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    for path in (out / "slurm").iterdir():
        assert subprocess.run(["bash", "-n", str(path)], check=False).returncode == 0, path
    gates = jobs["storage-checkpoints-h100-a"]["gates"]["slurm"]
    assert [g["section"] for g in gates] == ["seq-write", "seq-read", "rand-read", "parallel-read", "mdtest"]
    assert gates[0]["command"].endswith(f"--min-write-mbps {cat.lustre.gate_fraction * 500 * 256:g}")
    assert json.loads((out / "gates.json").read_text()) == data


@pytest.mark.parametrize(("stack", "catalog_source"), [
    ("aws-p5", AWS.fsx_lustre.source),
    ("azure-ndv5", AZURE.managed_lustre.tiers_source),
    ("gcp-a3mega", GCP.managed_lustre.tiers_source),
])
def test_cloud_lustre_from_published_tiers(tmp_path: Path, stack: str, catalog_source: str) -> None:
    spec = yaml.safe_load((STACKS / f"Pulumi.{stack}.yaml").read_text())["config"]["gpufleet:storage"]["lustre"]
    t = _targets(_run(tmp_path, stack))
    assert "scratch" not in t
    f = storage_catalog().lustre.gate_fraction
    for name in ("datasets", "checkpoints"):
        vol = spec[name]
        gate = t[name]["gates"]["write_mbps"]
        assert gate["value"] == pytest.approx(f * vol["throughput_mbps_per_tib"] * vol["capacity_gib"] / 1024,
                                              abs=0.1)
        assert catalog_source in gate["source"]
        assert storage_catalog().lustre.throughput_sources[stack.split("-")[0]] in gate["source"]
    # Kubernetes: the checkpoints claim only (datasets is mounted read-only), one Job per GPU pool.
    names = [p.name for p in (tmp_path / "out" / "kubernetes").iterdir()]
    assert names and all(n.startswith("storage-checkpoints-") for n in names), names


def _stack_with(tmp_path: Path, scratch: dict[str, Any]) -> Path:
    doc = yaml.safe_load((STACKS / "Pulumi.onprem-h100.yaml").read_text())
    doc["config"]["gpufleet:storage"]["local_nvme"].update(scratch)
    f = tmp_path / "Pulumi.onprem-h100.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_drive_class_devices_and_overrides(tmp_path: Path) -> None:
    f = _stack_with(tmp_path, {"drive_class": "pcie4-m2", "devices": ["/dev/nvme1n1", "/dev/nvme2n1"],
                               "bench_gates": {"min_read_iops": 123456}})
    t = _targets(_run(tmp_path, str(f)))
    cat = storage_catalog()
    m2 = cat.nvme.classes["pcie4-m2"]
    assert t["scratch"]["gates"]["read_mbps"]["value"] == pytest.approx(cat.nvme.gate_fraction * 2 * m2.seq_read_mbps)
    assert t["scratch"]["gates"]["read_iops"] == {"value": 123456,
                                                  "source": "stack: storage.local_nvme.bench_gates.min_read_iops"}


@pytest.mark.parametrize(("scratch", "key", "fragment"), [
    ({"drive_class": "pcie9-hyper"}, "drive_class", "NVMe class"),
    # The stack reader refuses .nan itself (at its line and column) before the schema sees it.
    ({"bench_gates": {"min_read_mbps": float("nan")}}, "column", "not a finite number"),
    ({"bench_gates": {"min_write_mbps": 0}}, "min_write_mbps", "greater than 0"),
])
def test_bad_stack_values_refused(tmp_path: Path, scratch: dict[str, Any], key: str, fragment: str) -> None:
    f = _stack_with(tmp_path, scratch)
    r = CliRunner().invoke(app, ["bench", "storage", "--stack", str(f), "--out", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 1, r.output
    err = json.loads(r.stdout)
    assert key in json.dumps(err) and fragment in json.dumps(err)
    assert not (tmp_path / "o").exists()  # refused before anything is written


def test_errors_follow_the_contract(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["bench", "storage", "--stack", "local", "--out", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 1 and "no storage to measure" in json.loads(r.stdout)["error"]["message"]
    r = CliRunner().invoke(app, ["bench", "storage", "--stack", "onprem-h100", "--image", "fio:latest\nx",
                                 "--out", str(tmp_path / "o"), "--json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["key"] == "--image"


def test_catalog_refuses_nan(tmp_path: Path) -> None:
    text = DATA_FILE.read_text()
    bad = tmp_path / "storage.yaml"
    bad.write_text(text.replace("seq_read_mbps: 6500", "seq_read_mbps: .nan", 1))
    with pytest.raises(ValueError, match="finite"):
        load_storage(bad)


def test_inspect_fio_sums_the_nodes_files(tmp_path: Path) -> None:
    """A Lustre run writes one JSON per node: the gate is on their sum."""
    one = CliRunner().invoke(app, ["inspect", "fio", str(FIO), "--json", "--min-write-mbps", "10"])
    assert one.exit_code == 1  # 5.1 MB/s on one node
    two = CliRunner().invoke(app, ["inspect", "fio", str(FIO), str(FIO), "--json", "--min-write-mbps", "10"])
    assert two.exit_code == 0, two.output
    assert json.loads(two.stdout)["gates"][0]["bw_bytes"] == 2 * 5096143.0


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_rendered_job_file_and_node_script_run_in_fio(tmp_path: Path) -> None:
    """The job file and the per-node runner as rendered, run by a real fio on a temporary folder (tiny size and
    runtime): every section writes one JSON that the parser and the gates read, and the test files are removed."""
    from gpufleet.validation import storage as st
    from gpufleet.validation.fio import parse_fio

    none = st.Threshold(None, "test")
    gates = st.TargetGates(none, none, none, none, none)
    target = st.StorageTarget("scratch", "local", str(tmp_path / "mnt"), gates)
    (tmp_path / "mnt").mkdir()
    s = st.StorageSettings(gpus_per_node=2, size="4M", runtime_s=1, ramp_s=0)
    job = st.StorageJob("storage-scratch-n0", target, "pool", ("n0",))
    jobfile = tmp_path / "scratch.fio"
    jobfile.write_text(st.render_jobfile(target, s))
    results = tmp_path / "results"
    script = st.node_script(job, s, str(results), str(jobfile))
    proc = subprocess.run(["bash", "-c", script], env={**os.environ, "GPUFLEET_NODE": "n0"}, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in results.iterdir()) == sorted(
        f"n0-scratch-{name}.json" for name, _, _ in st.SECTIONS)
    for name, direction, _ in st.SECTIONS:
        r = parse_fio((results / f"n0-scratch-{name}.json").read_text())
        total = r.total(direction)
        assert total is not None and total[0] > 0 and total[1] > 0, name
    assert list((tmp_path / "mnt" / "gpufleet-bench").iterdir()) == []  # the node's test files are gone


def test_bench_only_settings_stay_out_of_the_role_vars(tmp_path: Path) -> None:
    """drive_class and bench_gates are for the bench: the local_scratch role gets the keys it reads, as before."""
    from gpufleet.inventory.writer import cluster_vars
    from gpufleet.spec import load_spec

    f = _stack_with(tmp_path, {"drive_class": "pcie4-e1s", "bench_gates": {"min_read_mbps": 100}})
    spec = load_spec(str(f))
    assert spec.storage.local_nvme is not None and spec.storage.local_nvme.drive_class == "pcie4-e1s"
    assert cluster_vars(spec)["gpufleet_local_nvme"] == {"mount_path": "/scratch", "raid0": True, "devices": []}
