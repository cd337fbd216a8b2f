"""drift_pause: the node paused during converge was reported lost (task, time waited) and the rerun of the hosts
the summary named converged it like the node that was never paused."""

import json
import os
from pathlib import Path

import pytest
from nodestate import assert_locked

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
PAUSED = "gpufleet-mol-pause-1"


@pytest.mark.parametrize("pkg", ["libnccl2", "libnccl-dev"])
def test_both_nodes_end_converged(host, pkg):
    assert_locked(host, pkg, "2.26.2-1+cuda12.8", "/etc/apt/preferences.d/gpufleet-nccl.pref")
    assert "NCCL_DEBUG=WARN" in host.file("/etc/nccl.conf").content_string


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
    first, at = r["first"], r["paused_at"]
    assert at and first["lost_task"] == at
    assert (first["unreachable"], first["failed_hosts"], first["rerun"]) == ([PAUSED], [], [PAUSED])
    assert first["states"] == {"gpufleet-mol-pause-0": "done", PAUSED: "unreachable"}
    assert first["other_finished"] is True
    assert first["lost"] in ("timed out after 30 s (task_timeout)", f"stopped answering (Container {PAUSED} is paused)")
    assert f"unreachable: {PAUSED} ({at}: {first['lost']} (waited " in first["verdict"]
    assert first["verdict"].endswith(f"; rerun them: --limit {PAUSED}")
    assert f"{PAUSED}: {at}: unreachable: {first['lost']}" in first["summary"]
    assert "deserialization" not in first["summary"]
    assert r["rerun"]["ok"] is True and r["rerun"]["hosts"] == [PAUSED]
