"""drift_pause: the node paused during converge was reported lost (task, time waited) and the rerun of the hosts
the summary named converged it like the node that was never paused."""

import json
import os
from pathlib import Path

import pytest

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PAUSED = "gpufleet-mol-pause-1"


def test_both_nodes_end_converged(host):
    lines = host.file("/etc/sysctl.d/90-gpufleet.conf").content_string.splitlines()
    assert "vm.max_map_count=1048576" in lines


def test_the_lost_node_was_waited_for_no_longer_than_the_task_timeout(host):
    if host.backend.get_hostname() != PAUSED:
        pytest.skip("checked once")
    first = json.loads((OUT / "pause.json").read_text())["first"]
    # Paused mid-exec: the timeout (30 s) ended the wait; paused before the exec: docker refused at once.
    assert first["waited_s"] is not None and first["waited_s"] < 45
    assert first["lost"].startswith("timed out after 30 s") == (first["waited_s"] >= 30)


def test_the_first_run_reported_the_paused_node_unreachable_and_the_other_finished(host):
    if host.backend.get_hostname() != PAUSED:
        pytest.skip("checked once")
    r = json.loads((OUT / "pause.json").read_text())
    # The paused node fails on the task it was paused in, or on the next one that needs the node (a task skipped
    # by its condition runs no exec).
    first, at = r["first"], r["first"]["lost_task"]
    assert r["paused_at"] and at
    assert (first["unreachable"], first["failed_hosts"], first["rerun"]) == ([PAUSED], [], [PAUSED])
    assert first["states"] == {"gpufleet-mol-pause-0": "done", PAUSED: "unreachable"}
    assert first["other_finished"] is True
    assert first["lost"] in ("timed out after 30 s (task_timeout)", f"stopped answering (Container {PAUSED} is paused)")
    assert f"unreachable: {PAUSED} ({at}: {first['lost']} (waited " in first["verdict"]
    assert first["verdict"].endswith(f"; rerun them: --limit {PAUSED}")
    assert f"{PAUSED}: {at}: unreachable: {first['lost']}" in first["summary"]
    assert "deserialization" not in first["summary"]
    assert r["rerun"]["ok"] is True and r["rerun"]["hosts"] == [PAUSED]
