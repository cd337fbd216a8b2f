"""Converge with one node paused mid-run (`docker pause`), then rerun the hosts the summary names.

Usage: pause_converge.py INVENTORY PLAYBOOK HOST OUT.json. The node is paused as its third task inside a role
starts (task names change with the roles; the position is what matters), and unpaused once the run is over.
ANSIBLE_TASK_TIMEOUT is 30 s here (ansible.cfg sets 1800 s for real runs; see docs/drift.md): a paused
container never answers a `docker exec` already running, and refuses new ones at once.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from gpufleet.ansible_run import print_summary, run_playbook

TIMEOUT = "30"


def main() -> None:
    inventory, playbook, host, out = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    started: list[str] = []
    paused: list[str] = []

    def on_event(event: Mapping[str, Any]) -> None:
        data = event.get("event_data") or {}
        if event.get("event") != "runner_on_start" or data.get("host") != host or not data.get("role"):
            return
        started.append(str(data.get("task")))
        if len(started) == 3 and not paused:
            subprocess.run(["docker", "pause", host], check=True, capture_output=True)
            paused.append(f"{data['role']} : {data['task']}")

    env = {"ANSIBLE_TASK_TIMEOUT": TIMEOUT}
    try:
        first = run_playbook(playbook, inventory, live=False, on_event=on_event, envvars=env)
    finally:
        if paused:
            subprocess.run(["docker", "unpause", host], check=True, capture_output=True)
    text = io.StringIO()
    print_summary(first, Console(file=text, width=300, force_terminal=False))
    lost = next((t for t in first.failures if t.host == host), None)
    other = [h for h in first.hosts if h != host]
    # The rerun: exactly what the summary says.
    rerun = run_playbook(playbook, inventory, live=False, limit=",".join(first.rerun_hosts), envvars=env)
    result = {
        "paused_at": paused[0] if paused else None,
        "first": {
            "unreachable": first.unreachable_hosts, "failed_hosts": first.failed_hosts, "rerun": first.rerun_hosts,
            "states": {h: s.state for h, s in first.hosts.items()}, "verdict": first.verdict(),
            "lost_task": lost.label if lost else None, "lost": lost.lost if lost else None,
            "waited_s": lost.duration if lost else None, "summary": text.getvalue(),
            # The other node ran the play to its end: as many tasks as in the rerun of the lost one, or more.
            "other_finished": all(first.hosts[h].state == "done" and first.hosts[h].failed == 0 for h in other),
        },
        "rerun": {"ok": rerun.ok, "hosts": list(rerun.hosts), "verdict": rerun.verdict()},
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
