"""``make bench``: time the sandbox's main operations and write a Markdown table.

Measures: cold ``make up`` (node images and containers removed first, fixture repo rebuilt), warm ``make up``
(everything in place), a fresh converge of one node (its container recreated), and a no-op rerun of a converged
node. Writes ``benchmarks/results/<date>.md`` and prints it.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpufleet import REPO_ROOT

RESULTS = REPO_ROOT / "benchmarks" / "results"
GPUFLEET = str(REPO_ROOT / ".venv" / "bin" / "gpufleet")


#: What each timed command last reported as changed ("OK: 3 hosts, 0 task(s) changed"), for the table.
CHANGED: list[str] = []
_CHANGED = re.compile(r"(\d+) task\(s\) changed")


def _run(*cmd: str) -> None:
    # The CLI prints its progress and verdict on stderr (stdout is kept for --json).
    out = subprocess.run(cmd, check=True, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True).stdout
    found = _CHANGED.findall(out)
    CHANGED.append(found[-1] if found else "")


def _timed(fn: Callable[[], None]) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


def _cold() -> None:
    from gpufleet.sandbox import cluster, engine, image

    engine.ensure_engine()
    cluster.down("local")
    for tag in (image.node_tag(), f"{image.NODE_REPO}:latest", image.base_tag()):
        subprocess.run([engine.docker_bin(), "rmi", "-f", tag], capture_output=True, check=False)
    shutil.rmtree(cluster.FIXTURE_REPO_DIR, ignore_errors=True)
    _run("make", "up")


def _fresh_node() -> None:
    subprocess.run(["docker", "rm", "-f", "gpufleet-local-gpu-1"], capture_output=True, check=False)
    from gpufleet.sandbox import cluster, image
    from gpufleet.workflow import resolve_stack

    # up=True: the stack file sizes the sandbox (the running one lacks the node just removed).
    cluster.up(resolve_stack("local", up=True).spec, image.node_tag())
    _run(GPUFLEET, "converge", "--stack", "local", "--limit", "gpu-1")


def _versions() -> str:
    out = []
    for cmd in (["docker", "version", "--format", "{{.Server.Version}}"], [sys.executable, "--version"]):
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        out.append(r.stdout.strip() or r.stderr.strip())
    from ansible.release import __version__ as ansible_version

    return f"docker {out[0]}, {out[1]}, ansible-core {ansible_version}"


def main() -> int:
    timed = [
        ("cold `make up` (images, repo and containers removed)", _timed(_cold)),
        ("warm `make up` (no-op)", _timed(lambda: _run("make", "up"))),
        ("fresh converge of one node", _timed(_fresh_node)),
        ("no-op rerun of a converged node", _timed(lambda: _run(GPUFLEET, "converge", "--stack", "local",
                                                                 "--limit", "gpu-1"))),
    ]
    rows = [(name, secs, changed) for (name, secs), changed in zip(timed, CHANGED, strict=True)]
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    lines = [
        f"# gpufleet benchmarks, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB memory, {platform.platform()}.",
        f"Versions: {_versions()}.",
        "",
        "| operation | seconds | tasks changed |",
        "|---|---:|---:|",
        *[f"| {name} | {secs:.1f} | {changed} |" for name, secs, changed in rows],
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{datetime.now(UTC):%Y%m%d-%H%M}.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
