"""Runs tests/fixtures/runner_events/site.yml for real and checks it still matches the recording.

The events come from gpufleet's own callback (gpufleet_events) since issue 17; the recordings were made through
ansible-runner and still match: same events, same event_data keys. If this fails after an ansible-core upgrade,
re-record with
``.venv/bin/python tests/fixtures/runner_events/record.py`` and review the fixture diff.
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rich.console import Console

from gpufleet.ansible_run import RunResult, build_result
from gpufleet.ansible_run.recording import read_events

FIXTURES = Path(__file__).parent / "fixtures" / "runner_events"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("ssh") is None, reason="node-c's unreachable result needs an ssh client"),
]


def _recorder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("runner_events_record", FIXTURES / "record.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outline(result: RunResult) -> list[tuple[Any, ...]]:
    """What must not change between recordings; event order across hosts may."""
    return sorted(
        (t.host, t.label, t.status, t.changed, t.ignored, t.msg, json.dumps(t.diff, sort_keys=True))
        for t in result.tasks
    )


def _shape(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    """The event_data keys seen per event name. Left out: the tags of the play's last task that ansible-runner's
    event context still held when the next play (or the stats) began; gpufleet never read them there."""
    shape: dict[str, set[str]] = {}
    for e in events:
        keys = set(e.get("event_data", {}))
        if e["event"] in ("playbook_on_play_start", "playbook_on_stats"):
            keys.discard("task_tags")
        shape.setdefault(e["event"], set()).update(keys)
    return shape


def test_real_run_matches_the_recording(tmp_path: Path) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=False, color_system=None)
    result, events = _recorder().record("run", tmp_path, console=console)

    recorded = build_result(read_events(FIXTURES / "run.jsonl"), rc=4, status="failed")
    replayed = build_result(events, rc=result.rc, status=result.status)
    assert (result.rc, result.status) == (4, "failed")
    assert {h: s.to_json() for h, s in result.hosts.items()} == {
        h: s.to_json() for h, s in recorded.hosts.items()
    }
    assert outline(replayed) == outline(recorded)
    assert result.to_json()["changed"] == recorded.to_json()["changed"]
    # Tags come from the live events (gpufleet's callback plugin), inherited role tags included.
    conf = next(t for t in result.tasks if t.host == "node-a" and t.task == "Write the host config")
    assert conf.tags == ["config", "network"]
    assert (tmp_path / "work" / "node-a.conf").read_text() == "host=node-a\nmtu=9000\n"
    # Same events as the recording (ansible-runner's shape), with the same event_data keys per event.
    assert _shape(events) == _shape(read_events(FIXTURES / "run.jsonl"))
    # The private data dir was given, so the run's artifacts are kept there: ansible's output and every event.
    assert result.artifact_dir is not None
    artifacts = Path(result.artifact_dir)
    assert "PLAY RECAP" in (artifacts / "stdout").read_text()
    assert len(read_events(artifacts / "events.jsonl")) == len(events)

    # Not a terminal: one plain line per finished task and host, then the summary, no ANSI.
    text = out.getvalue()
    assert "\x1b[" not in text
    lines = text.splitlines()
    assert "node-b: failed: Refuse the broken node: node-b is marked broken" in lines
    assert "node-a: changed: demo : Write the role marker" in lines
    assert lines[-1] == ("FAILED: failed on node-b; unreachable: node-c; rc=4; 3 hosts, 5 task(s) changed; "
                         "rerun them: --limit node-b,node-c")
    assert sum(1 for line in lines if line.startswith(("node-a: ", "node-b: ", "node-c: "))) >= len(
        result.tasks
    )
