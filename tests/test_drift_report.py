"""The drift report on a real check run recorded from the Molecule drift scenario after its perturbations:
gpufleet-mol-drift-1 had GPU3's power limit lowered, persistence off (nvidia-persistenced stopped), the boot
unit disabled, /etc/nccl.conf and a sysctl edited, nvidia-utils-570 unheld, NCCL downgraded and unheld;
gpufleet-mol-drift-2 had its driver downgraded and unheld.
(Re-record: tests/fixtures/drift/trim.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.ansible_run import RunResult, build_result
from gpufleet.ansible_run.recording import read_events
from gpufleet.drift import EXIT_DRIFTED, EXIT_ERROR, EXIT_IN_SYNC, RawResults, build_report, render_text

FIXTURES = Path(__file__).parent / "fixtures" / "drift"
S, D, C = "gpufleet-mol-drift-1", "gpufleet-mol-drift-2", "gpufleet-mol-drift-0"
DRIVER_PKGS = ("nvidia-driver-570-open, nvidia-utils-570, nvidia-compute-utils-570, libnvidia-compute-570, "
               "libnvidia-common-570, nvidia-dkms-570-open, nvidia-kernel-source-570-open, "
               "nvidia-kernel-common-570, libnvidia-cfg1-570")


def _replay() -> tuple[RunResult, RawResults]:
    events = read_events(FIXTURES / "check.jsonl")
    meta = json.loads((FIXTURES / "check.meta.json").read_text())
    raw = RawResults()
    for e in events:
        raw(e)
    return build_result(events, rc=meta["rc"], status=meta["status"], check=True), raw


@pytest.fixture(scope="module")
def replay() -> tuple[RunResult, RawResults]:
    return _replay()


def test_each_perturbation_is_named_with_from_and_to(replay: tuple[RunResult, RawResults]) -> None:
    report = build_report(*replay)
    # Every package line has dpkg's installed version and hold state, read in the same run by each role's import
    # of the shared install path (one task file, so one task path for the driver's changed hold and NCCL's
    # unchanged read on the same host: results are told apart by the task's uuid).
    assert [i.line() for i in report.items] == [
        f"{S} nvidia_driver: nvidia-utils-570: 570.172.08-0ubuntu1 installed, as locked; not held, expected held",
        f"{S} nvidia_driver: nvidia-persistenced: enabled, inactive; expected enabled, started",
        f"{S} gpu_settings: GPU0-7 persistence mode off, expected on",
        f"{S} gpu_settings: GPU3 power limit 500 W, expected 700 W",
        f"{S} gpu_settings: gpufleet-gpu-settings.service: disabled; expected enabled",
        f"{S} nccl: libnccl-dev, libnccl2: 2.25.1-1+cuda12.8 installed, 2.26.2-1+cuda12.8 locked; not held",
        f"{S} nccl: /etc/nccl.conf: NCCL_DEBUG INFO -> WARN",
        f"{S} host_tuning: sysctl vm.max_map_count differs, expected 1048576",
        f"{D} nvidia_driver: {DRIVER_PKGS}: 570.133.20-0ubuntu1 installed, 570.172.08-0ubuntu1 locked; not held",
    ]
    assert report.exit_code == EXIT_DRIFTED and report.errors == []


def test_the_file_change_carries_its_diff(replay: tuple[RunResult, RawResults]) -> None:
    nccl = next(i for i in build_report(*replay).items if i.component == "nccl" and i.kind == "file")
    assert "-NCCL_DEBUG=INFO\n+NCCL_DEBUG=WARN\n" in nccl.diff
    assert nccl.diff.startswith("--- /etc/nccl.conf (on the host)\n+++ /etc/nccl.conf (desired)\n")


def test_only_the_driver_package_change_needs_a_drain(replay: tuple[RunResult, RawResults]) -> None:
    report = build_report(*replay)
    assert [i.kind for i in report.items if i.disruptive] == ["package"]
    assert (report.needs_drain(D), report.needs_drain(S), report.needs_drain(C)) == (True, False, False)


def test_components_include_the_ones_in_sync(replay: tuple[RunResult, RawResults]) -> None:
    report = build_report(*replay)
    assert report.components[C] == ["slurm"]
    assert set(report.components[S]) >= {"nvidia_driver", "nvidia_repo", "gpu_settings", "nccl", "host_tuning",
                                         "slurm"}
    assert report.drifted(S, "host_tuning") and not report.drifted(S, "slurm") and not report.drifted(D, "nccl")


def test_without_the_untrimmed_results_apt_still_reports_versions(replay: tuple[RunResult, RawResults]) -> None:
    # RunResult keeps 2000 characters of apt's output; nine Inst lines still fit in the recorded run.
    report = build_report(replay[0])
    assert any("570.133.20-0ubuntu1 installed, 570.172.08-0ubuntu1 locked" in i.message for i in report.items)


def test_text_and_json_views(replay: tuple[RunResult, RawResults]) -> None:
    report = build_report(*replay)
    text = render_text(report)
    assert f"{D} (needs drain)" in text and "      +NCCL_DEBUG=WARN" in text
    assert text.splitlines()[-1] == f"drifted: 9 change(s) on {S}, {D}"
    data = report.to_json()
    assert data["hosts"][S]["components"]["gpu_settings"] is True and data["hosts"][C]["drifted"] is False
    assert json.loads(json.dumps(data)) == data


def test_in_sync_and_error_exit_codes(replay: tuple[RunResult, RawResults]) -> None:
    result, _ = replay
    clean = RunResult(rc=0, status="successful", check=True, hosts=result.hosts,
                      tasks=[t for t in result.tasks if not t.changed])
    assert build_report(clean).exit_code == EXIT_IN_SYNC
    assert "in sync: 3 host(s)" in render_text(build_report(clean))
    broken = RunResult(rc=2, status="failed", check=True, hosts=result.hosts, tasks=result.tasks)
    broken.hosts[D].failed = 1
    t = next(t for t in result.tasks if t.host == D and t.changed)
    broken.tasks = [*result.tasks, type(t)(**{**t.__dict__, "status": "failed", "msg": "apt lock"})]
    report = build_report(broken)
    assert report.exit_code == EXIT_ERROR
    assert report.errors == [f"{D}: {t.label}: apt lock"]


def test_json_components_are_keyed_by_role_not_by_play(replay: tuple[RunResult, RawResults]) -> None:
    # The recorded run's plays are "Converge - GPU nodes" and "Converge - Slurm"; fact gathering ran in the first.
    data = build_report(*replay).to_json()
    assert list(data["hosts"][S]["components"]) == ["nvidia_driver", "nvidia_repo", "gpu_settings", "nccl",
                                                    "host_tuning", "slurm"]
    assert list(data["hosts"][C]["components"]) == ["slurm"]
    # The text report and the JSON name the same components.
    assert {i.component for i in build_report(*replay).items} <= set(data["hosts"][S]["components"])


def test_a_task_outside_roles_counts_under_its_playbook_file(replay: tuple[RunResult, RawResults]) -> None:
    result, _ = replay
    t = next(t for t in result.tasks if t.host == C)
    lock = type(t)(**{**t.__dict__, "role": None, "play": "Version lock - compatibility rules before anything",
                      "task": "Check the version lock", "action": "gpufleet_lock_check", "status": "ok",
                      "changed": False, "task_path": "{project}/ansible/playbooks/lock_check.yml:10"})
    run = RunResult(rc=0, status="successful", check=True, hosts=result.hosts, tasks=[*result.tasks, lock])
    assert build_report(run).components[C] == ["slurm", "lock_check"]
