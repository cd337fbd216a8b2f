"""roles/slurm's comparison of a compute node's slurm.conf declaration with ``slurmd -C`` (issue 29 point 1): the one
grammar of Slurm node records (gpufleet/module_utils/slurm_node.py), the verdict, and the slurm_node_hardware module
that runs it on the node.

The real ``slurmd -C`` line is an 8x H100 p5.48xlarge's, quoted from https://github.com/aws/aws-parallelcluster/issues/5797
in aws-samples/awsome-distributed-training (1.architectures/2.aws-parallelcluster/README.md); the two-line form (UpTime
on its own line) is the format slurmd(8) documents (https://slurm.schedmd.com/slurmd.html, -C and --conf) and
Debian's 22.05 prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpufleet import REPO_ROOT
from gpufleet.module_utils.slurm_node import (
    NOTICE_EVENT,
    NodeLayout,
    SlurmNodeError,
    declared_layout,
    parse_fields,
    parse_slurmd_c,
    verdict,
)
from tests.ansible_local import RUN_MODULE

P5 = ("NodeName=p5-st-p5-1 CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 "
      "RealMemory=2047961 UpTime=2-00:08:02\n")
# A 2-CPU test-bed container (molecule/slurm's GPU nodes run on a 2-core machine), as Debian 12's slurmd 22.05 prints.
CONTAINER = ("NodeName=gpufleet-mol-slurm-1 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
             "RealMemory=7940\nUpTime=0-00:12:31\n")
# The declaration molecule/slurm makes for its GPU nodes (the real 8x H100 node's layout).
H100 = "CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=1024"
MODULE = REPO_ROOT / "ansible" / "library" / "slurm_node_hardware.py"


def test_slurmd_c_read_in_both_layouts_of_its_output() -> None:
    name, hw = parse_slurmd_c(P5)
    assert (name, hw) == ("p5-st-p5-1", NodeLayout(192, 2, 48, 2, 2047961))
    name, hw = parse_slurmd_c(CONTAINER)
    assert (name, hw) == ("gpufleet-mol-slurm-1", NodeLayout(2, 1, 2, 1, 7940))
    assert hw.slots == 2


def test_boards_multiply_the_sockets() -> None:
    _, hw = parse_slurmd_c("NodeName=n CPUs=64 Boards=2 SocketsPerBoard=2 CoresPerSocket=16 ThreadsPerCore=1 "
                           "RealMemory=1000")
    assert (hw.sockets, hw.slots) == (4, 64)


@pytest.mark.parametrize(("text", "says"), [
    ("NodeName=n CPUs=2 RealMemory=10", "no SocketsPerBoard, CoresPerSocket, ThreadsPerCore"),
    ("NodeName=n CPUs=two Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1",
     "CPUs='two' is not a whole number"),
    ("slurmd: error: something else", "no NodeName"),
])
def test_unreadable_slurmd_c_is_an_error_naming_the_field(text: str, says: str) -> None:
    with pytest.raises(SlurmNodeError, match=says):
        parse_slurmd_c(text)


def test_declared_layout_with_slurm_conf_defaults() -> None:
    assert declared_layout(parse_fields(H100)) == NodeLayout(192, 2, 48, 2, 1024)
    # CPUs only: Slurm infers CPUs sockets of one core (the 192:1:1 sinfo shows in the ParallelCluster issue).
    assert declared_layout(parse_fields("NodeName=n CPUs=192 RealMemory=10")) == NodeLayout(192, 192, 1, 1, 10)
    # No CPUs: the product of the layout; no RealMemory: nothing to compare it with.
    assert declared_layout(parse_fields("Sockets=2 CoresPerSocket=4")) == NodeLayout(8, 2, 4, 1, None)


def test_scontrol_show_node_values_with_spaces_stay_whole() -> None:
    out = ("NodeName=gpu-0 Arch=x86_64 CoresPerSocket=48\n   CPUAlloc=0 CPUEfctv=192 CPUTot=192 CPULoad=0.01\n"
           "   Gres=gpu:8(S:0-1)\n   OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)\n"
           "   RealMemory=1024 AllocMem=0 FreeMem=N/A Sockets=2 Boards=1\n   ThreadsPerCore=2\n")
    f = parse_fields(out)
    assert f["OS"] == "Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)"
    assert (f["CPUTot"], f["Gres"], f["FreeMem"], f["ThreadsPerCore"]) == ("192", "gpu:8(S:0-1)", "N/A", "2")


def test_declaring_more_than_the_hardware_fails_with_host_fields_and_fix() -> None:
    _, found = parse_slurmd_c(CONTAINER)
    v = verdict("gpu-0", declared_layout(parse_fields(H100)), found, config_overrides=False)
    assert v.notice is None and v.failure is not None
    msg = v.failure
    assert msg.startswith("slurm: gpu-0: slurm.conf declares more than slurmd -C finds (")
    for words in ("CPUs declared 192, slurmd -C 2", "Sockets declared 2, slurmd -C 1",
                  "CoresPerSocket declared 48, slurmd -C 2", "ThreadsPerCore declared 2, slurmd -C 1"):
        assert words in msg
    # More memory than declared is no difference (RealMemory below the node's keeps memory for the system).
    assert "RealMemory" not in msg.split("(Low")[0]
    assert "INVALID_REG" in msg and "Low CPUs, Low socket*core*thread count" in msg
    assert "https://slurm.schedmd.com/slurm.conf.html" in msg
    assert ("slurm_node_cpus=2, slurm_node_layout='Sockets=1 CoresPerSocket=2 ThreadsPerCore=1', "
            "slurm_node_real_memory_mb at most 7940") in msg
    assert [d.field for d in v.differences if d.refused] == ["CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore"]


def test_less_memory_than_declared_fails() -> None:
    _, found = parse_slurmd_c(P5)
    declared = declared_layout(parse_fields("CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 "
                                            "RealMemory=2100000"))
    v = verdict("p5", declared, found, config_overrides=False)
    assert v.failure is not None and "RealMemory declared 2100000, slurmd -C 2047961" in v.failure
    assert "(Low RealMemory;" in v.failure


def test_config_overrides_turns_the_failure_into_a_notice() -> None:
    _, found = parse_slurmd_c(CONTAINER)
    v = verdict("gpu-0", declared_layout(parse_fields(H100)), found, config_overrides=True)
    assert v.failure is None
    assert v.notice == {"event": NOTICE_EVENT, "detail": (
        "CPUs declared 192, slurmd -C 2; Sockets declared 2, slurmd -C 1; CoresPerSocket declared 48, slurmd -C 2; "
        "ThreadsPerCore declared 2, slurmd -C 1 (SlurmdParameters=config_overrides: slurmd registers the "
        "declaration)")}


def test_matching_declaration_says_nothing() -> None:
    _, found = parse_slurmd_c(P5)
    declared = declared_layout(parse_fields("CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=2000000"))
    for overrides in (False, True):
        assert verdict("p5", declared, found, overrides) == verdict("p5", found, found, overrides)
        assert verdict("p5", declared, found, overrides).differences == ()
        assert verdict("p5", declared, found, overrides).notice is None
        assert verdict("p5", declared, found, overrides).failure is None


def test_same_total_other_shape_registers_and_is_a_notice() -> None:
    # ParallelCluster's CPUs-only line on a p5 (192 sockets of one core): slurmctld accepts it (192 = 192), jobs
    # get a wrong socket layout; said, not failed.
    _, found = parse_slurmd_c(P5)
    v = verdict("p5", declared_layout(parse_fields("CPUs=192 RealMemory=2000000")), found, config_overrides=False)
    assert v.failure is None and v.notice is not None
    assert v.notice["detail"] == ("Sockets declared 192, slurmd -C 2; CoresPerSocket declared 1, slurmd -C 48; "
                                  "ThreadsPerCore declared 1, slurmd -C 2 (Slurm schedules by the declaration)")


def _module(tmp_path: Path, slurmd_out: str | None, **args: Any) -> dict[str, Any]:
    """The module as Ansible runs it, with a stand-in slurmd on PATH (None: no slurmd at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    slurmd = bin_dir / "slurmd"
    if slurmd_out is not None:
        (tmp_path / "out").write_text(slurmd_out)
        slurmd.write_text(f'#!/bin/sh\n[ "$1" = -C ] || exit 2\ncat {tmp_path / "out"}\n')
        slurmd.chmod(0o755)
    params = {"node": "gpu-0", "slurmd": str(slurmd), "_ansible_check_mode": True, **args}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": params}), capture_output=True, text=True,
                          check=False, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return dict(json.loads(proc.stdout))


def test_module_fails_a_node_slurmctld_would_drain(tmp_path: Path) -> None:
    res = _module(tmp_path, CONTAINER, declared=H100)
    assert res["failed"] is True and res["msg"].startswith("slurm: gpu-0: slurm.conf declares more than")
    assert res["found"] == {"CPUs": 2, "Sockets": 1, "CoresPerSocket": 2, "ThreadsPerCore": 1, "RealMemory": 7940}
    assert "gpufleet_notice" not in res


def test_module_reports_a_notice_under_config_overrides_and_changes_nothing(tmp_path: Path) -> None:
    res = _module(tmp_path, CONTAINER, declared=H100, config_overrides=True)
    assert not res.get("failed") and res["changed"] is False and res["present"] is True
    assert res["gpufleet_notice"]["event"] == NOTICE_EVENT
    assert res["gpufleet_notice"]["detail"].startswith("CPUs declared 192, slurmd -C 2;")
    assert res["declared"] == {"CPUs": 192, "Sockets": 2, "CoresPerSocket": 48, "ThreadsPerCore": 2,
                               "RealMemory": 1024}


def test_module_says_nothing_where_they_agree(tmp_path: Path) -> None:
    res = _module(tmp_path, P5, declared="CPUs=192 Sockets=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=2000000")
    assert not res.get("failed") and res["differences"] == [] and "gpufleet_notice" not in res


def test_module_without_slurmd_reads_nothing(tmp_path: Path) -> None:
    res = _module(tmp_path, None, declared=H100)
    assert not res.get("failed") and res["present"] is False and "not found" in res["msg"]


def test_module_refuses_a_layout_that_is_not_numbers(tmp_path: Path) -> None:
    res = _module(tmp_path, P5, declared="CPUs=192 Sockets=two")
    assert res["failed"] is True and "Sockets='two' is not a whole number" in res["msg"]
    assert "slurm_node_layout" in res["msg"]
