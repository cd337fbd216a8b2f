"""Rolling remediation: batch sizes, drains only where needed, one batch out of service, --max-fail."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.drift import DriftItem, DriftReport, HostOutcome, HostPlan, parse_batch, plan_hosts, remediate


@pytest.mark.parametrize(("spec", "total", "size"), [("10%", 100, 10), ("10%", 3, 1), ("25%", 10, 3), ("4", 100, 4),
                                                     (2, 5, 2), ("100%", 7, 7)])
def test_batch_sizes(spec: str | int, total: int, size: int) -> None:
    assert parse_batch(spec, total) == size


@pytest.mark.parametrize("spec", ["0", "0%", "-1", "ten", "1.5", ""])
def test_bad_batch_names_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ValueError, match=r"count|whole number"):
        parse_batch(spec, 10)


def _report() -> DriftReport:
    items = [
        DriftItem("gpu-0", "gpu_settings", "gpu_setting", "t", "GPU3 power limit 500 W, expected 700 W"),
        DriftItem("gpu-1", "nvidia_driver", "package", "t", "x: a installed, b locked", disruptive=True),
        DriftItem("gpu-1", "nvidia_driver", "hold", "t", "x not held"),
        DriftItem("gpu-1", "nccl", "file", "t", "/etc/nccl.conf differs"),
    ]
    hosts = ["control-0", "gpu-0", "gpu-1", "gpu-2"]
    return DriftReport(hosts=hosts, components={h: [] for h in hosts}, items=items)


def test_plans_drain_only_hosts_with_disruptive_changes() -> None:
    plans = plan_hosts(_report())
    assert plans == [HostPlan("gpu-0", ("gpu_settings",), False), HostPlan("gpu-1", ("nvidia_driver", "nccl"), True)]
    assert plans[1].reason == "gpufleet: remediate nvidia_driver,nccl"


class FakeExecutor:
    """Records calls; hosts in ``fail`` fail their post-checks."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.fail = fail or set()
        self.calls: list[tuple[str, list[str]]] = []
        self.held: dict[str, str] = {}
        self.out_of_service: set[str] = set()
        self.max_out = 0

    def apply(self, batch: Sequence[HostPlan]) -> dict[str, HostOutcome]:
        self.calls.append(("apply", [p.host for p in batch]))
        self.out_of_service |= {p.host for p in batch if p.drain}
        self.max_out = max(self.max_out, len(self.out_of_service))
        out = {}
        for p in batch:
            ok = p.host not in self.fail
            if ok:
                self.out_of_service.discard(p.host)
            out[p.host] = HostOutcome(p.host, p.drain, ok, resumed=p.drain and ok,
                                      message="" if ok else "Post-check - the driver answers: rc 18")
        return out

    def hold(self, host: str, reason: str) -> None:
        self.held[host] = reason
        self.out_of_service.add(host)
        self.max_out = max(self.max_out, len(self.out_of_service))


def _plans(n: int, drain: bool = True) -> list[HostPlan]:
    return [HostPlan(f"gpu-{i}", ("nvidia_driver",), drain) for i in range(n)]


def test_all_pass_in_batches() -> None:
    ex = FakeExecutor()
    result = remediate(_plans(5), batch_size=2, max_fail=1, executor=ex)
    assert result.batches == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"], ["gpu-4"]]
    assert result.ok and not ex.held and ex.max_out == 2


def test_a_failed_host_stays_drained_with_the_reason_and_the_run_stops() -> None:
    ex = FakeExecutor(fail={"gpu-1"})
    result = remediate(_plans(6), batch_size=2, max_fail=1, executor=ex)
    assert result.batches == [["gpu-0", "gpu-1"]]
    assert result.failed == ["gpu-1"]
    assert ex.held == {"gpu-1": "gpufleet: remediate failed: Post-check - the driver answers: rc 18"}
    assert result.skipped == ["gpu-2", "gpu-3", "gpu-4", "gpu-5"]
    assert "--max-fail 1" in result.stopped and not result.ok


def test_held_hosts_use_up_room_so_never_more_than_one_batch_is_out() -> None:
    ex = FakeExecutor(fail={"gpu-0", "gpu-3"})
    result = remediate(_plans(6), batch_size=2, max_fail=3, executor=ex)
    assert ex.max_out <= 2
    assert result.batches[:2] == [["gpu-0", "gpu-1"], ["gpu-2"]]
    assert set(result.failed) == {"gpu-0", "gpu-3"}
    assert "fills the batch" in result.stopped


def test_settings_only_hosts_are_not_limited_by_held_hosts() -> None:
    ex = FakeExecutor(fail={"gpu-0"})
    plans = [HostPlan("gpu-0", ("nvidia_driver",), True), *[HostPlan(f"cpu-{i}", ("gpu_settings",), False)
                                                           for i in range(3)]]
    result = remediate(plans, batch_size=1, max_fail=0, executor=ex)
    assert result.batches == [["gpu-0"], ["cpu-0"], ["cpu-1"], ["cpu-2"]]
    assert result.failed == ["gpu-0"] and result.skipped == []


def test_ansible_executor_resumes_only_hosts_that_pass_health(monkeypatch: pytest.MonkeyPatch) -> None:
    """With health checks the batch run does not resume; a second, resume-tagged run resumes the healthy."""
    from pathlib import Path
    from typing import Any

    from gpufleet.ansible_run import HostStats, RunResult
    from gpufleet.drift import runner

    calls: list[dict[str, Any]] = []

    def fake_run(playbook: Path, inventory: Path, **kw: Any) -> RunResult:
        calls.append({"limit": kw["limit"], "tags": kw.get("tags"), "extravars": kw["extravars"]})
        hosts = kw["limit"].split(",")
        return RunResult(rc=0, status="successful", finished=True, hosts={h: HostStats(state="done") for h in hosts})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    ex = runner.AnsibleExecutor(runner.Target(Path("/inv.yml")),
                                health=lambda hosts: {"gpu-1": "Xid 79: GPU fell off the bus", "gpu-0": None})
    out = ex.apply([HostPlan("gpu-0", ("nvidia_driver",), True), HostPlan("gpu-1", ("nvidia_driver",), True),
                    HostPlan("gpu-2", ("gpu_settings",), False)])
    assert calls[0]["extravars"]["gpufleet_remediate_resume"] is False
    assert calls[0]["extravars"]["gpufleet_remediate_drain"] == ["gpu-0", "gpu-1"]
    assert calls[1] == {"limit": "gpu-0", "tags": ["resume"], "extravars": {"gpufleet_remediate_drain": ["gpu-0"]}}
    assert (out["gpu-0"].resumed, out["gpu-1"].ok, out["gpu-2"].ok) == (True, False, True)
    assert out["gpu-1"].message == "health: Xid 79: GPU fell off the bus"
    ex.hold("gpu-1", "gpufleet: remediate failed: health")
    assert calls[2]["tags"] == ["hold"]
    assert calls[2]["extravars"]["gpufleet_remediate_hold_reason"] == "gpufleet: remediate failed: health"


def test_the_converge_s_notices_reach_the_host_s_outcome_and_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """A recovered interrupted dpkg run (the dpkg_hold module's gpufleet_notice) is said per host, text and JSON."""
    from pathlib import Path
    from typing import Any

    from gpufleet.ansible_run import HostStats, RunResult, TaskResult
    from gpufleet.drift import runner

    def fake_run(playbook: Path, inventory: Path, **kw: Any) -> RunResult:
        hosts = kw["limit"].split(",")
        recovered = TaskResult("gpu-0", "p", "nvidia_driver", "t", "dpkg_hold", "changed", True, res={
            "gpufleet_notice": {"event": "recovered interrupted dpkg", "detail": "nvidia-utils-570 1.0 (iHR)"}})
        return RunResult(rc=0, status="successful", finished=True, tasks=[recovered],
                         hosts={h: HostStats(state="done") for h in hosts})

    monkeypatch.setattr(runner, "run_playbook", fake_run)
    ex = runner.AnsibleExecutor(runner.Target(Path("/inv.yml")))
    log: list[str] = []
    result = remediate([HostPlan("gpu-0", ("nvidia_driver",), True), HostPlan("gpu-1", ("nccl",), False)],
                       batch_size=2, max_fail=1, executor=ex, log=log.append)
    line = "recovered interrupted dpkg on gpu-0: nvidia-utils-570 1.0 (iHR)"
    assert [o["notices"] for o in result.to_json()["outcomes"]] == [[line], []]
    assert line in log
