"""A host that stops answering mid-run, on events recorded from a real `docker pause` (community.docker.docker
connection, ANSIBLE_TASK_TIMEOUT=20; see the .meta.json beside each recording):

* pause_in_task: the container was paused 6 s into `sleep 12`; the exec hangs until ansible's task timeout.
* paused_before_task: the container was paused before the run; `docker exec` refuses at once and ansible said
  "Module result deserialization failed: No start of json char found".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.ansible_run import RunResult, build_result
from gpufleet.ansible_run.display import plain_line
from gpufleet.ansible_run.recording import read_events
from gpufleet.drift import EXIT_ERROR, build_report, render_text, render_textfile

FIXTURES = Path(__file__).parent / "fixtures" / "drift"
PAUSED, OTHER = "driftprec-pause-a", "driftprec-pause-b"
TASK = "Long task (the pause hits it)"


def _replay(name: str) -> RunResult:
    meta = json.loads((FIXTURES / f"{name}.meta.json").read_text())
    return build_result(read_events(FIXTURES / f"{name}.jsonl"), rc=meta["rc"], status=meta["status"])


@pytest.mark.parametrize(("name", "why", "waited"), [
    ("pause_in_task", "timed out after 20 s (task_timeout)", "20.1"),
    ("paused_before_task", f"stopped answering (Container {PAUSED} is paused)", "0.6"),
])
def test_the_paused_host_is_unreachable_with_the_task_and_the_time_waited(name: str, why: str, waited: str) -> None:
    result = _replay(name)
    (lost,) = result.failures
    assert (lost.host, lost.task, lost.status) == (PAUSED, TASK, "failed")
    assert lost.reason == f"unreachable: {why} (waited {waited} s)"
    assert "deserialization" not in lost.reason
    assert result.unreachable_hosts == [PAUSED] and result.failed_hosts == []
    assert result.hosts[PAUSED].state == "unreachable" and result.hosts[OTHER].state == "done"
    assert plain_line(lost) == f"{PAUSED}: failed: {TASK}: unreachable: {why} (waited {waited} s)"
    assert result.verdict() == (f"FAILED: unreachable: {PAUSED} ({TASK}: {why} (waited {waited} s)); rc=2; "
                                f"2 hosts, 2 task(s) changed; rerun them: --limit {PAUSED}")
    assert result.to_json()["rerun"] == [PAUSED]


@pytest.mark.parametrize("name", ["pause_in_task", "paused_before_task"])
def test_the_other_host_finishes_the_play(name: str) -> None:
    result = _replay(name)
    assert [(t.task, t.status) for t in result.tasks if t.host == OTHER] == [
        (TASK, "changed"), ("Next task", "changed"), ("Third task", "ok")]


def test_drift_reports_the_lost_host_as_an_error_to_rerun_not_as_drift() -> None:
    result = _replay("pause_in_task")
    result.check = True
    report = build_report(result)
    assert report.exit_code == EXIT_ERROR and report.unreachable_hosts == [PAUSED]
    assert report.errors == [f"{PAUSED}: {TASK}: unreachable: timed out after 20 s (task_timeout) (waited 20.1 s)"]
    assert render_text(report).splitlines()[-1] == (
        f"drift unknown on {PAUSED}: fix them, then rerun with --limit {PAUSED}")
    assert report.to_json()["rerun"] == [PAUSED]
    text = render_textfile(report, stack="s", now=0)
    assert f'gpufleet_drift_check_error{{stack="s",host="{PAUSED}"}} 1' in text
    assert f'gpufleet_drift_check_error{{stack="s",host="{OTHER}"}} 0' in text


def test_an_ordinary_module_failure_is_not_called_unreachable() -> None:
    events = [e for e in read_events(FIXTURES / "paused_before_task.jsonl")]
    for e in events:
        if e["event"] == "runner_on_failed":
            e["event_data"]["res"] = {"msg": "apt lock held by another process", "rc": 100, "changed": False}
    result = build_result(events, rc=2, status="failed")
    (failed,) = result.failures
    assert failed.lost is None and failed.reason == "apt lock held by another process"
    assert result.failed_hosts == [PAUSED] and result.unreachable_hosts == []


@pytest.mark.parametrize("res", [
    # A mirror that timed out is the task's failure, whatever words it uses.
    {"msg": "Request failed: <urlopen error [Errno 110] Connection timed out>", "status": -1},
    # A module that crashed printed nothing too, but the connection answered.
    {"msg": "Module result deserialization failed: No start of json char found", "module_stdout": "",
     "module_stderr": "Segmentation fault (core dumped)\n", "rc": 139},
    # A task that manages containers on the host may mention a paused one in its own answer.
    {"msg": "Error response from daemon: Container web-1 is paused, unpause the container before exec"},
])
def test_task_failures_that_mention_connections_are_not_lost_hosts(res: dict[str, object]) -> None:
    events = read_events(FIXTURES / "paused_before_task.jsonl")
    for e in events:
        if e["event"] == "runner_on_failed":
            e["event_data"]["res"] = {**res, "changed": False}
    (failed,) = build_result(events, rc=2, status="failed").failures
    assert failed.lost is None


def test_a_loop_whose_items_all_lost_the_host_is_a_lost_host() -> None:
    # Seen in the drift_pause scenario: host_tuning's loop over sysctls on the paused node failed with "One or
    # more items failed", each item refused by the Docker daemon.
    events = read_events(FIXTURES / "paused_before_task.jsonl")
    refused = next(e for e in events if e["event"] == "runner_on_failed")["event_data"]["res"]
    item = {**refused, "failed": True, "item": "vm.max_map_count=1048576"}
    for e in events:
        if e["event"] == "runner_on_failed":
            e["event_data"]["res"] = {"msg": "One or more items failed", "failed": True, "changed": False,
                                      "results": [item, {**item, "item": "net.core.rmem_max=67108864"}]}
    (lost,) = build_result(events, rc=2, status="failed").failures
    assert lost.lost == f"stopped answering (Container {PAUSED} is paused)"
    # One item that failed on its own keeps the loop a failure of the task.
    for e in events:
        if e["event"] == "runner_on_failed":
            e["event_data"]["res"]["results"][1] = {"failed": True, "msg": "invalid value", "item": "x"}
    (failed,) = build_result(events, rc=2, status="failed").failures
    assert failed.lost is None
