"""The sandbox/Molecule node image, built locally (no registry is reachable).

``debootstrap --variant=minbase bookworm`` → ``docker import`` → ``docker build``. Both images are tagged with a
content hash of their inputs, so a rerun finds them and takes seconds.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from gpufleet.sandbox.engine import docker_bin

HERE = Path(__file__).parent
DOCKERFILE = HERE / "node-image" / "Dockerfile"
SUITE = "bookworm"
MIRROR = os.environ.get("GPUFLEET_DEBIAN_MIRROR", "http://deb.debian.org/debian")
BASE_REPO = "gpufleet/bookworm-minbase"
NODE_REPO = "gpufleet/node"


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def base_tag() -> str:
    return f"{BASE_REPO}:{_hash(SUITE, 'minbase', MIRROR)}"


def node_tag() -> str:
    return f"{NODE_REPO}:{_hash(base_tag(), DOCKERFILE.read_text())}"


def image_exists(tag: str) -> bool:
    r = subprocess.run([docker_bin(), "image", "inspect", tag], capture_output=True)
    return r.returncode == 0


def build_base(log: bool = True) -> str:
    tag = base_tag()
    if image_exists(tag):
        return tag
    if log:
        print(f"building {tag}: debootstrap --variant=minbase {SUITE} (about a minute)", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpufleet-rootfs-") as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR],
                       check=True, stdout=subprocess.DEVNULL)
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run([docker_bin(), "import", "-", tag], stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
        if tar.stdout:
            tar.stdout.close()
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap root failed")
    return tag


def build_node(log: bool = True) -> str:
    """Build (or find) the node image; returns its tag."""
    tag = node_tag()
    if image_exists(tag):
        return tag
    base = build_base(log)
    if log:
        print(f"building {tag} (systemd, python3, slurm)", flush=True)
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}  # no buildx plugin with Debian's client
    subprocess.run([docker_bin(), "build", "-q", "--build-arg", f"BASE={base}", "-t", tag,
                    "-f", str(DOCKERFILE), str(DOCKERFILE.parent)], check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run([docker_bin(), "tag", tag, f"{NODE_REPO}:latest"], check=True)
    return tag


def main() -> int:
    """``python -m gpufleet.sandbox.image``: build (or find) the node image and print its content-hash tag."""
    print(build_node(log=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
