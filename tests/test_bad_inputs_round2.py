"""Bad input, second round (issue 27): readers bounded in memory and time, numbers bounded before conversion,
tracebacks turned into the contract, output folders that never lose the user's files.

Each test is for a class of input, not one example: every reader opens files through gpufleet.inputs.open_input,
so the FIFO/device/socket rows run every command that reads a file; numbers are bounded in each grammar (YAML,
nccl text and JSON, nvidia-smi XML, topo -m, nvlink -s, the environment).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from tests.test_bad_inputs import GOOD, nccl_row

runner = CliRunner()

TOPO = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\t{cpus}\t0\t\tN/A\n"
        "GPU1\tNV18\t X \t48-95\t1\t\tN/A\n")
NVLINK = "GPU {index}: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: {speed} GB/s\n"
SMI = ("<?xml version=\"1.0\" ?>\n<nvidia_smi_log><driver_version>570.172.08</driver_version>"
       "<gpu id=\"00000000:04:00.0\"><product_name>NVIDIA H100 80GB HBM3</product_name>"
       "<gpu_power_readings><requested_power_limit>{power} W</requested_power_limit></gpu_power_readings>"
       "</gpu></nvidia_smi_log>\n")

#: Every command that reads a user file given on its command line ({f} is the file).
READERS: list[list[str]] = [
    ["inspect", "nccl", "{f}"],
    ["inspect", "smi-xml", "{f}"],
    ["inspect", "topo", "{f}"],
    ["inspect", "nvlink", "{f}", "--json"],
    ["bench", "bench-gate", "{f}", "--gpu", "h100-sxm5-80gb"],
    ["lock", "check", "--stack", "{f}"],
    ["report", "--events", "{f}"],
    ["inspect", "fio", "{f}"],
    ["inspect", "mdtest", "{f}"],
    ["bench", "storage", "--stack", "{f}"],
]


def invoke(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, argv, env={"GPUFLEET_MAX_INPUT_MB": "", **(env or {})})
    out = click.unstyle(result.stdout + result.stderr)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        f"traceback: {result.exception!r}\n{out}")
    assert "Traceback" not in out
    return result.exit_code, result.stdout, click.unstyle(result.stderr)


def contract_error(argv: list[str], fragment: str, env: dict[str, str] | None = None) -> str:
    """Run ``argv``; it must exit 1 with the one-line error holding ``fragment`` (and JSON with --json)."""
    code, stdout, stderr = invoke(argv, env)
    assert code == 1, stdout + stderr
    assert stderr.startswith("error: "), stderr
    assert fragment in stderr, stderr
    if "--json" in argv:
        assert set(json.loads(stdout)["error"]) >= {"file", "key", "value", "message", "fix"}
    return stderr


# --- point 2 / class 3: devices, FIFOs and sockets refused at once; lines and ranges bounded ------------------

@pytest.mark.parametrize("argv", READERS, ids=[" ".join(a[:2]) for a in READERS])
def test_a_device_is_refused_by_every_reader(argv: list[str], tmp_path: Path) -> None:
    # Named like a stack file so that every command gets as far as reading it.
    link = tmp_path / "Pulumi.lab.yaml"
    link.symlink_to("/dev/zero")
    t0 = time.monotonic()
    contract_error([a.replace("{f}", str(link)) for a in argv], "is a character device, not a regular file")
    assert time.monotonic() - t0 < 5


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "Pulumi.lab.yaml"
    os.mkfifo(path)
    yield path


@pytest.mark.parametrize("argv", READERS, ids=[" ".join(a[:2]) for a in READERS])
def test_a_fifo_is_refused_without_waiting_for_a_writer(argv: list[str], fifo: Path) -> None:
    # A subprocess with a timeout: on the old code the open blocks forever (no writer), which must fail the
    # test instead of hanging the suite.
    args = [a.replace("{f}", str(fifo)) for a in argv]
    proc = subprocess.run([sys.executable, "-c", "from gpufleet.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "GPUFLEET_MAX_INPUT_MB": ""})
    assert proc.returncode == 1, proc.stderr
    assert "is a FIFO (named pipe), not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        contract_error(["inspect", "topo", str(path), "--json"], "is a socket, not a regular file")


def test_a_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "log.txt"
    link.symlink_to("/dev/zero")
    contract_error(["inspect", "nccl", str(link)], "not a regular file")


def test_a_line_without_end_is_bounded(tmp_path: Path) -> None:
    from gpufleet.inputs import MAX_LINE_CHARS

    log = tmp_path / "nccl.txt"
    log.write_text(nccl_row("417.5") + "x" * (MAX_LINE_CHARS + 10))
    contract_error(["inspect", "nccl", str(log)], f"line 5 is longer than {MAX_LINE_CHARS:,} characters")


@pytest.mark.parametrize(("cpus", "fragment"), [
    ("0-400000000", "is not of the form"),     # digits: bounded before int()
    ("0-9000", "not a range of CPU ids below 8192"),
    ("47-0", "not a range of CPU ids below 8192"),
    ("0-a", "is not of the form 0-47,96-143"),   # class 9: a traceback on the old code
    (",".join(f"{i}-8191" for i in range(0, 8000, 100)), "names more than 8192 CPUs"),
])
def test_topo_cpu_affinity_is_bounded_by_the_hardware(tmp_path: Path, cpus: str, fragment: str) -> None:
    f = tmp_path / "topo.txt"
    f.write_text(TOPO.format(cpus=cpus))
    t0 = time.monotonic()
    contract_error(["inspect", "topo", str(f), "--json"], fragment)
    assert time.monotonic() - t0 < 5


def test_topo_and_nvlink_indices_are_bounded(tmp_path: Path) -> None:
    f = tmp_path / "nvlink.txt"
    f.write_text(NVLINK.format(index="9" * 5000, speed="26.562"))
    contract_error(["inspect", "nvlink", str(f)], "no nvidia-smi nvlink -s output")
    f.write_text(NVLINK.format(index="64", speed="26.562"))
    contract_error(["inspect", "nvlink", str(f)], "a node has fewer than 64 GPUs")
    f.write_text(NVLINK.format(index="0", speed="1.2.3"))
    code, stdout, _ = invoke(["inspect", "nvlink", str(f), "--json"])
    assert code == 0 and json.loads(stdout)["gpus"][0]["links"] == {}  # "1.2.3 GB/s" is a state, not a speed
    t = tmp_path / "topo.txt"
    t.write_text(TOPO.format(cpus="0-47").replace("GPU1", "GPU64"))
    contract_error(["inspect", "topo", str(t)], "a node has fewer than 64 GPUs")


def test_hardware_bounds_cover_the_catalog() -> None:
    from gpufleet.catalog import GPUS, get_gpu
    from gpufleet.module_utils import smi_xml
    from gpufleet.module_utils.topology import MAX_GPUS, MAX_NVLINKS

    assert smi_xml.MAX_GPUS == MAX_GPUS  # one bound, stated twice only because module_utils cannot share it
    for key in GPUS:
        model = get_gpu(key)
        assert model.gpus_per_node < MAX_GPUS
        assert (model.nvlinks_per_gpu_pair or 0) * model.gpus_per_node < MAX_NVLINKS * MAX_GPUS


def test_nccl_rows_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpufleet.parsers import ParseError, nccl

    monkeypatch.setattr(nccl, "MAX_ROWS", 3)
    row = nccl_row("417.5").splitlines()[-1] + "\n"
    with pytest.raises(ParseError, match="more than 3 result rows"):
        nccl.parse_nccl(nccl_row("417.5") + row * 5)


def _peak_mib(code: str) -> float:
    """Peak resident memory of a fresh interpreter running ``code``: VmHWM, the high-water mark of this
    process's own memory (ru_maxrss would carry the forking pytest's over exec)."""
    probe = code + "\nprint(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "GPUFLEET_MAX_INPUT_MB": ""}, check=True)
    return int(out.stdout.split()[-1]) / 1024


@pytest.mark.parametrize("kind", ["smi-xml", "nccl"])
def test_peak_memory_just_under_the_size_limit(tmp_path: Path, kind: str) -> None:
    """An input just under its size limit, made of the smallest units its parser keeps, stays under 256 MiB."""
    from gpufleet.inputs import LIMITS

    f = tmp_path / "big"
    if kind == "smi-xml":
        # Empty elements are the most per byte; the first file has as many GPUs as bytes allow.
        for body in ("<gpu><x/></gpu>" * ((LIMITS["xml"] - 100) // 15), "<gpu>" + "<x/>" * ((LIMITS["xml"] - 100) // 4)
                     + "</gpu>"):
            f.write_text(f"<nvidia_smi_log>{body}</nvidia_smi_log>")
            code = f"from gpufleet.cli import main; import sys; sys.argv=['g','inspect','smi-xml','{f}']\n" \
                   "try:\n main()\nexcept SystemExit: pass"
            assert _peak_mib(code) < 256
    else:
        row = nccl_row("417.5").splitlines()[-1] + "\n"
        f.write_text(nccl_row("417.5") + row * ((LIMITS["log"] - 1000) // len(row)))
        code = f"from gpufleet.inputs import iter_lines; from gpufleet.parsers.nccl import parse_nccl_lines\n" \
               f"from pathlib import Path\ntry:\n parse_nccl_lines(iter_lines(Path('{f}'), 'log'))\n" \
               "except Exception: pass"
        assert f.stat().st_size > LIMITS["log"] - (1 << 20)
        assert _peak_mib(code) < 256


@pytest.mark.parametrize("shape", ["list", "mappings"])
def test_yaml_peak_memory_is_bounded_by_its_node_count(tmp_path: Path, shape: str) -> None:
    """A YAML file within the size limit: refused above MAX_YAML_EVENTS nodes before the tree is built, and the
    largest accepted one (mappings: the most memory per node) stays under 256 MiB."""
    from gpufleet.inputs import LIMITS, MAX_YAML_EVENTS

    f = tmp_path / "Pulumi.lab.yaml"
    if shape == "list":  # 8 MiB of "- 1": 1.4 million nodes, 1.1 GiB and 50 s on the old code
        f.write_text("config:\n  x:\n" + "  - 1\n" * ((LIMITS["yaml"] - 100) // 6))
        contract_error(["lock", "check", "--stack", str(f)], f"more than {MAX_YAML_EVENTS:,} values")
    else:
        f.write_text("config:\n" + "".join(f"  k{i}: {{a: 1}}\n" for i in range(MAX_YAML_EVENTS // 4 - 10)))
    code = f"from gpufleet.inputs import load_yaml\nfrom pathlib import Path\ntry:\n load_yaml(Path('{f}'))\n" \
           "except Exception: pass"
    assert _peak_mib(code) < 256


# --- point 3 / class 4: digits bounded before conversion, non-finite and implausible values refused ----------

def test_yaml_integers_of_thousands_of_digits_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD.replace("count: 2", "count: " + "9" * 5000))
    contract_error(["lock", "check", "--stack", str(f), "--json"], "an integer of 5000 digits (at most 30)")


def test_yaml_non_finite_floats_are_refused(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD.replace("count: 2", "count: .inf"))
    contract_error(["lock", "check", "--stack", str(f)], "not a finite number (.inf)")


@pytest.mark.parametrize(("name", "text"), [
    ("size-digits.txt", nccl_row("417.5").replace("8589934592", "9" * 5000)),
    ("busbw-digits.txt", nccl_row("4" * 5000)),
    ("size-json.json", '{"results": [{"size": ' + "9" * 5000 + ', "count": 1, "type": "float", "redop": "sum", '
                       '"out_of_place": {"time": 1, "alg_bw": 1, "bus_bw": 1}}]}'),
])
def test_nccl_numbers_of_thousands_of_digits_are_the_contract(tmp_path: Path, name: str, text: str) -> None:
    f = tmp_path / name
    f.write_text(text)
    contract_error(["inspect", "nccl", str(f), "--json"], "")


@pytest.mark.parametrize("busbw", ["1.7e308", "901", "-5"])
def test_busbw_above_the_gpus_peak_is_an_error_not_a_pass(tmp_path: Path, busbw: str) -> None:
    f = tmp_path / "run.txt"
    f.write_text(nccl_row(busbw))
    contract_error(["bench", "bench-gate", str(f), "--gpu", "h100-sxm5-80gb", "--json"], "is not a measurement")
    f.write_text(nccl_row("417.5"))
    code, stdout, _ = invoke(["bench", "bench-gate", str(f), "--gpu", "h100-sxm5-80gb", "--json"])
    assert code == 0 and json.loads(stdout)[0]["status"] == "pass"


def test_smi_xml_numbers_of_thousands_of_digits_are_the_contract(tmp_path: Path) -> None:
    f = tmp_path / "smi.xml"
    f.write_text(SMI.format(power="7" * 5000))
    contract_error(["inspect", "smi-xml", str(f), "--json"], "not a number nvidia-smi prints")
    f.write_text(SMI.format(power="700.00"))
    code, stdout, _ = invoke(["inspect", "smi-xml", str(f), "--json"])
    assert code == 0 and json.loads(stdout)["gpus"][0]["power_limit_w"] == 700.0


@pytest.mark.parametrize("value", ["abc", "1e15", "nan", "-1", "9" * 5000])
def test_max_input_env_is_validated(tmp_path: Path, value: str) -> None:
    f = tmp_path / "run.txt"
    f.write_text(nccl_row("417.5"))
    stderr = contract_error(["inspect", "nccl", str(f)], "GPUFLEET_MAX_INPUT_MB", env={"GPUFLEET_MAX_INPUT_MB": value})
    assert "not a size in MiB" in stderr


def test_unknown_gpus_directive_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD)
    contract_error(["bench", "bench-render", "--stack", str(f), "--out", str(tmp_path / "b"), "--gpus-directive",
                    "gress", "--no-check"], "not one of gpus-per-node, gres, none")
    assert not (tmp_path / "b").exists()


# --- class 9: a file where a folder is expected, an inventory of the wrong shape --------------------------------

def test_out_that_is_a_file_is_the_contract(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD)
    out = tmp_path / "bench"
    out.write_text("mine\n")
    contract_error(["bench", "bench-render", "--stack", str(f), "--out", str(out), "--no-check"],
                   "is a file, not a folder")
    assert out.read_text() == "mine\n"


def test_lock_render_inventory_that_is_a_file_is_the_contract(tmp_path: Path) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD)
    inv = tmp_path / "hosts.yml"
    inv.write_text("all: {}\n")
    contract_error(["lock", "render", "--stack", str(f), "--inventory", str(inv)], "is a file, not an inventory")
    assert inv.read_text() == "all: {}\n"


@pytest.mark.parametrize("text", ["all: [a, b]\n", "all: {children: [gpu]}\n", "all: {children: {gpu: {hosts: [a]}}}\n",
                                  "- all\n"])
def test_inventory_of_the_wrong_shape_is_the_contract(tmp_path: Path, text: str) -> None:
    from gpufleet.errors import InputError
    from gpufleet.validation.run import inventory_hosts

    inv = tmp_path / "hosts.yml"
    inv.write_text(text)
    with pytest.raises(InputError, match="not a mapping"):
        inventory_hosts(inv)


# --- point 5 / class 6: no command deletes or overwrites a file it did not create ---------------------------

@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stack whose inventory exists, and a playbook double that writes one bundle per GPU host."""
    import gpufleet.drift.runner
    import gpufleet.inventory.writer
    import gpufleet.validation.run
    from gpufleet.ansible_run import RunResult
    from gpufleet.validation.health import BUNDLE_SCHEMA

    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(GOOD)
    monkeypatch.setattr(gpufleet.inventory.writer, "INVENTORIES_DIR", tmp_path / "inventories")
    inv = tmp_path / "inventories" / "lab"
    inv.mkdir(parents=True)
    (inv / "hosts.yml").write_text("all:\n  children:\n    gpu: {hosts: {gpu-0: {}, gpu-1: {}}}\n"
                                   "    pool_gpu: {hosts: {gpu-0: {}, gpu-1: {}}}\n")

    def playbook(*args: Any, extravars: dict[str, str], **kw: Any) -> RunResult:
        out = Path(extravars["node_validation_report_dir"])
        for host in ("gpu-0", "gpu-1"):
            (out / f"{host}.json").write_text(json.dumps({"schema": BUNDLE_SCHEMA, "host": host, "pool": "gpu"}))
        return RunResult(rc=0)

    monkeypatch.setattr(gpufleet.validation.run, "run_playbook", playbook)
    monkeypatch.setattr(gpufleet.drift.runner, "run_playbook", lambda *a, **k: RunResult(rc=0))
    return stack


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_validate_report_into_a_folder_of_the_users_files_leaves_them_untouched(lab: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    (report / "raw").mkdir(parents=True)
    (report / "raw" / "gpu-0.json").write_text('{"mine": true}')
    (report / "raw" / "notes.json").write_text('{"keep": "me"}')
    (report / "report.md").write_text("my own report\n")
    before = _files(report)
    contract_error(["validate", "--stack", str(lab), "--report", str(report), "--no-security"],
                   "is not empty (2 entries) and gpufleet did not write it")
    assert _files(report) == before


def test_validate_report_rerun_replaces_only_what_gpufleet_wrote(lab: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    code, _, stderr = invoke(["validate", "--stack", str(lab), "--report", str(report), "--no-security"])
    assert code in (0, 1) and "error:" not in stderr, stderr
    assert {"raw/gpu-0.json", "raw/gpu-1.json", "report.json", "report.md"} <= set(_files(report))
    # The user adds a file of their own to the folder gpufleet wrote; a second run keeps it.
    (report / "raw" / "notes.json").write_text('{"keep": "me"}')
    code, _, stderr = invoke(["validate", "--stack", str(lab), "--report", str(report), "--no-security"])
    assert "error:" not in stderr, stderr
    assert (report / "raw" / "notes.json").read_text() == '{"keep": "me"}'
    # A user file with the name of one gpufleet would write is refused, not overwritten.
    (report / "report.html").write_text("x")
    from gpufleet.outdir import claim

    out = claim(report, "--report")
    with pytest.raises(Exception, match="was not written by gpufleet"):
        out.write_text("report.html", "y")
    assert (report / "report.html").read_text() == "x"


def test_bench_render_out_keeps_the_users_files(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.lab.yaml"
    stack.write_text(GOOD)
    out = tmp_path / "bench"
    code, _, stderr = invoke(["bench", "bench-render", "--stack", str(stack), "--out", str(out), "--no-check"])
    assert code == 0, stderr
    (out / "slurm" / "mine.sbatch").write_text("#!/bin/sh\n")
    code, _, stderr = invoke(["bench", "bench-render", "--stack", str(stack), "--out", str(out), "--no-check"])
    assert code == 0, stderr
    assert (out / "slurm" / "mine.sbatch").read_text() == "#!/bin/sh\n"
    user = tmp_path / "mine"
    user.mkdir()
    (user / "job.sbatch").write_text("x")
    contract_error(["bench", "bench-render", "--stack", str(stack), "--out", str(user), "--no-check"],
                   "is not empty (1 entries) and gpufleet did not write it")
    assert _files(user) == {"job.sbatch": b"x"}


# --- point 1 / class 1: grammars strict where a protocol needs ASCII, parsed per field ---------------------------

def _stack_error(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(text, encoding="utf-8")
    contract_error(["lock", "check", "--stack", str(f), "--json"], fragment)


@pytest.mark.parametrize("address", [
    "fe80::1%eth0", "fe80::1%\\nSlurmUser=root", "\u212aube.example.com",  # Kelvin sign: .lower() made it "k"
    "gpu-\uff10.example.com",  # full-width digit zero
])
def test_host_addresses_are_ascii_without_zone_ids(tmp_path: Path, address: str) -> None:
    _stack_error(tmp_path, GOOD.replace("address: 192.0.2.20", f'address: "{address}"'),
                 "not an IP address or a DNS name")


@pytest.mark.parametrize("address", ["2001:db8::20", "gpu-0.example.com", "GPU-0.Example.com"])
def test_plain_addresses_still_pass(tmp_path: Path, address: str) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD.replace("address: 192.0.2.20", f'address: "{address}"'))
    code, _, stderr = invoke(["lock", "check", "--stack", str(f)])
    assert code == 0, stderr


@pytest.mark.parametrize("version", ["\uff15\uff17\uff10.172.08", "570.\u0661\u0667\u0662.08"])
def test_versions_are_ascii_digits_only(tmp_path: Path, version: str) -> None:
    _stack_error(tmp_path, GOOD.replace("    profile: h100-cuda12.8\n",
                                        f"    profile: h100-cuda12.8\n    versions: {{driver: \"{version}\"}}\n"),
                 "not a valid driver version")


DRIFT = "  gpufleet:drift: {{image: \"registry.example.com/gpufleet:1.0.0\", schedule: \"{schedule}\"}}\n"


@pytest.mark.parametrize(("schedule", "fragment"), [
    ("17 * * * $(id)", "day of week '$(id)'"),
    ("60 * * * *", "minute '60' is outside 0-59"),
    ("17 * * * * ; rm -rf /", "five fields"),
    ("a b c d e", "minute 'a'"),
    ("1\uff17 * * * *", "minute"),
    ("17 24 * * *", "hour '24' is outside 0-23"),
])
def test_drift_schedule_is_parsed_per_field(tmp_path: Path, schedule: str, fragment: str) -> None:
    _stack_error(tmp_path, GOOD.replace("config:\n", "config:\n" + DRIFT.format(schedule=schedule)), fragment)


@pytest.mark.parametrize("schedule", ["17 * * * *", "*/5 0-6,18-23 1 jan-mar mon-fri", "@hourly"])
def test_valid_drift_schedules_pass(schedule: str) -> None:
    from gpufleet.spec import _cron

    assert _cron(schedule) == schedule


# --- class 8: options and environment name themselves ----------------------------------------------------------

def test_validate_limit_matching_no_host_is_an_error_not_healthy(lab: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufleet.validation.run
    from gpufleet.ansible_run import RunResult

    # The playbook with a --limit that matches nothing reaches no host and writes no bundle.
    monkeypatch.setattr(gpufleet.validation.run, "run_playbook", lambda *a, **k: RunResult(rc=0))
    stderr = contract_error(["validate", "--stack", str(lab), "--limit", "gpu-9", "--no-security"],
                            "--limit 'gpu-9' matches no GPU host")
    assert "healthy" not in stderr.replace("not healthy", "")


@pytest.mark.parametrize("value", ["abc", "1e3", "9" * 5000])
def test_ansible_task_timeout_is_named(value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gpufleet.drift.runner import Target, check_drift
    from gpufleet.errors import InputError

    monkeypatch.setenv("ANSIBLE_TASK_TIMEOUT", value)
    with pytest.raises(InputError, match="not a number of seconds") as e:
        check_drift(Target(tmp_path / "hosts.yml", None, "lab"))
    assert e.value.problems[0].key == "ANSIBLE_TASK_TIMEOUT"


@pytest.mark.parametrize(("args", "key"), [
    (["--controller-cores", "0"], "--controller-cores"),   # blamed --nodes on the old code
    (["--controller-cores", "nan"], "--controller-cores"),
    (["--controller-cores", "inf"], "--controller-cores"),  # passed on the old code: no controller bound left
    (["--forks", "0"], "--forks"),
    (["--slices", "0"], "--slices"),
    (["--nodes", "10", "--slices", "11"], "--nodes"),
    (["--nodes", "0"], "--nodes"),
])
def test_scale_model_errors_name_the_option_that_is_wrong(args: list[str], key: str) -> None:
    code, stdout, _ = invoke(["bench", "scale-model", *args, "--json"])
    assert code == 1, stdout
    error = json.loads(stdout)["error"]
    assert error["key"] == key and error["fix"].startswith("pass ") and key in error["message"], error


# --- class 7: gates that cannot be fooled by markers or concatenated runs ---------------------------------------

def _gate(f: Path) -> tuple[int, list[dict[str, Any]]]:
    code, stdout, _ = invoke(["bench", "bench-gate", str(f), "--gpu", "h100-sxm5-80gb", "--json"])
    return code, json.loads(stdout)


BANNER = "# Collective test starting: all_reduce_perf\n"


@pytest.mark.parametrize("layout", ["banner", "bare", "marked-twice"])
def test_every_run_of_a_concatenated_log_is_gated_and_the_worst_counts(tmp_path: Path, layout: str) -> None:
    slow, fast = nccl_row("100.0"), nccl_row("417.5")
    text = {"banner": BANNER + slow + BANNER + fast, "bare": slow + fast,
            "marked-twice": "=== gpufleet nccl-tests all_reduce ===\n" + slow
                            + "=== gpufleet nccl-tests all_reduce ===\n" + fast}[layout]
    f = tmp_path / "job.txt"
    f.write_text(text)
    code, verdicts = _gate(f)
    assert [v["status"] for v in verdicts] == ["fail", "pass"], verdicts  # the old code gated the last run only
    assert code == 1
    assert len({v["label"] for v in verdicts}) == 2
    f.write_text(BANNER + fast + BANNER + fast)
    code, verdicts = _gate(f)
    assert code == 0 and [v["status"] for v in verdicts] == ["pass", "pass"]


@pytest.mark.parametrize("marker", ["alltoall", "broadcast"])
def test_a_marker_that_disagrees_with_the_runs_own_banner_is_refused(tmp_path: Path, marker: str) -> None:
    f = tmp_path / "job.txt"
    f.write_text(f"=== gpufleet nccl-tests {marker} ===\n" + BANNER + nccl_row("100.0"))
    # The old code took the marker's word: a slow all-reduce labelled alltoall was "not gated" and passed.
    contract_error(["bench", "bench-gate", str(f), "--gpu", "h100-sxm5-80gb", "--json"],
                   f"the section marker says {marker} but the run's own banner or command line says all_reduce")
    f.write_text("=== gpufleet nccl-tests all_reduce ===\n" + BANNER + nccl_row("417.5"))
    code, verdicts = _gate(f)
    assert code == 0 and [v["status"] for v in verdicts] == ["pass"]


# --- class 9: renderer options checked where they enter, naming the option ------------------------------------

@pytest.mark.parametrize(("option", "value", "fragment"), [
    ("--nccl-tests-dir", "/opt/nccl tests", "not an absolute path of plain characters"),  # a traceback before
    ("--nccl-tests-dir", "build\n#SBATCH --uid=0", "not an absolute path of plain characters"),
    ("--image", "my image:1", "not an image reference pinned by tag or digest"),  # reached the manifests before
    ("--image", "nccl-tests:1\n  privileged: true", "not an image reference pinned by tag or digest"),
])
def test_bench_render_options_are_the_contract(tmp_path: Path, option: str, value: str, fragment: str) -> None:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(GOOD)
    stderr = contract_error(["bench", "bench-render", "--stack", str(f), "--out", str(tmp_path / "b"), option, value,
                             "--no-check"], fragment)
    assert stderr.splitlines()[1].startswith(f"- {option}: {option} = "), stderr
    assert not (tmp_path / "b").exists()


def test_validate_gates_nccl_logs_before_any_node_is_checked(lab: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import gpufleet.validation.run

    ran: list[object] = []
    monkeypatch.setattr(gpufleet.validation.run, "run_playbook", lambda *a, **k: ran.append(a))
    bad = tmp_path / "run.txt"
    bad.write_text("no rows here\n")
    contract_error(["validate", "--stack", str(lab), "--nccl", str(bad), "--no-security"],
                   "no nccl-tests result rows found")
    assert ran == []  # the old code ran the whole validation playbook first


@pytest.mark.parametrize("rate", ["0", "-5", "100000"])
def test_validate_ib_rate_is_bounded(lab: Path, rate: str) -> None:
    code, _, stderr = invoke(["validate", "--stack", str(lab), "--ib-rate", rate, "--no-security"])
    assert code == 2 and "--ib-rate" in stderr  # 0 and -5 passed every port on the old code
