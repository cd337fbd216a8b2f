"""Bring the local test platform up (engine, collections, node image, fixture repository) and down again.

``python -m gpufleet.sandbox.platform start`` prints ``started`` when it started the Docker daemon itself
(so the caller knows to stop it), else ``running``. ``stop`` removes gpufleet's containers and stops the daemon
only if gpufleet started it.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

from gpufleet.sandbox import cluster, collections, engine, image, tools


@dataclass(frozen=True)
class Platform:
    started_engine: bool
    image: str


def prepare(log: bool = True) -> Platform:
    engine.install_packages(log)
    started = engine.ensure_engine()
    collections.ensure_collections(log)
    tag = image.build_node(log)
    from testbed.fixture_repo import build_repo

    build_repo(cluster.FIXTURE_REPO_DIR)
    tools.ensure_promtool()
    return Platform(started, tag)


def remove_test_containers() -> list[str]:
    """Molecule's leftovers (a run killed mid-way leaves them behind)."""
    r = subprocess.run([engine.docker_bin(), "ps", "-a", "--filter", "name=gpufleet-mol-", "--format",
                        "{{.Names}}"], capture_output=True, text=True, check=False)
    names = r.stdout.split()
    if names:
        subprocess.run([engine.docker_bin(), "rm", "-f", *names], capture_output=True, check=False)
    return names


def main(argv: list[str]) -> int:
    cmd = argv[1] if len(argv) > 1 else "start"
    if cmd == "start":
        p = prepare(log=True)
        print("started" if p.started_engine else "running")
        return 0
    if cmd == "stop":
        if engine.daemon_answers():
            remove_test_containers()
            if engine.PID_FILE.exists():
                cluster.down("local")
        stopped = engine.stop_engine()
        print("stopped dockerd" if stopped else "left the Docker daemon running (not started by gpufleet)")
        return 0
    print(f"usage: {argv[0]} start|stop", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
