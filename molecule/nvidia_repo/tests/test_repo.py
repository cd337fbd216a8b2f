"""nvidia_repo: the fixture repository is consumed through its key with signed-by, and resolves; the other
installers' sources prepare.yml planted are replaced, kept as .gpufleet-replaced copies (issue 28 point 4)."""

from pathlib import Path

import pytest
import yaml
from nodestate import assert_locked

KEYRING = "/etc/apt/keyrings/cuda-archive-keyring.asc"
SOURCE = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"


def test_key_installed_from_repository(host):
    key = host.file(KEYRING)
    assert key.mode == 0o644
    assert key.user == "root"
    assert key.content_string == host.file("/srv/gpufleet-repo/ubuntu2204/x86_64/3bf863cc.pub").content_string


def test_source_uses_signed_by(host):
    lines = [ln for ln in host.file(SOURCE).content_string.splitlines() if ln and not ln.startswith("#")]
    assert lines == [f"deb [signed-by={KEYRING}] file:///srv/gpufleet-repo/ubuntu2204/x86_64 /"]


def test_index_verified_and_packages_visible(host):
    update = host.run("apt-get update 2>&1")
    assert update.rc == 0
    assert "NO_PUBKEY" not in update.stdout and "not signed" not in update.stdout
    policy = host.run("apt-cache policy nvidia-driver-570-open").stdout
    assert "570.172.08-0ubuntu1" in policy and "570.133.20-0ubuntu1" in policy


def test_unsigned_copy_would_be_refused(host):
    # The same repository without signed-by: apt must refuse it (signing is in force, never trusted=yes).
    r = host.run(
        "mkdir -p /tmp/lists-nokey/partial && "
        "echo 'deb file:///srv/gpufleet-repo/ubuntu2204/x86_64 /' > /tmp/nokey.list && "
        "apt-get -o Dir::Etc::sourcelist=/tmp/nokey.list -o Dir::Etc::sourceparts=/nonexistent "
        "-o Dir::State::Lists=/tmp/lists-nokey update 2>&1"
    )
    assert "NO_PUBKEY" in r.stdout or "is not signed" in r.stdout, r.stdout


# Issue 28 point 4: the other installers' sources prepare.yml planted (tests/fixtures/apt/foreign_sources.yml) are moved
# aside as <file>.gpufleet-replaced copies, byte for byte, never deleted; the main sources.list keeps its other lines.
FOREIGN = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "apt" / "foreign_sources.yml"
URI = "file:///srv/gpufleet-repo/ubuntu2204/x86_64"


def _foreign():
    entries = yaml.safe_load(FOREIGN.read_text())["foreign_sources"]
    for e in entries:
        e["content"] = e["content"].replace("@URI@", URI)
    return entries


def test_foreign_sources_kept_as_replaced_copies(host):
    for e in _foreign():
        copy = host.file(e["path"] + ".gpufleet-replaced")
        assert copy.exists, e["path"]
        if e.get("append"):
            # The main file: the copy holds the planted line, the live file only commented out.
            assert e["content"].strip() in copy.content_string.splitlines()
            live = host.file(e["path"]).content_string.splitlines()
            assert e["content"].strip() not in live
            assert "# " + e["content"].strip() in live
        else:
            assert copy.content_string == e["content"], e["path"]
            # NVIDIA's cuda-keyring file has the role's own name: gpufleet's source now stands there.
            assert not host.file(e["path"]).exists or e["path"] == SOURCE, e["path"]


def test_the_conflict_planted_after_convergence_was_replaced_too(host):
    # breaks.yml's last break, restored by the rerun
    assert host.file("/etc/apt/sources.list.d/cuda-planted-again.sources.gpufleet-replaced").exists
    assert not host.file("/etc/apt/sources.list.d/cuda-planted-again.sources").exists


def test_only_gpufleet_s_source_points_at_the_repository(host):
    active = host.run(
        f"grep -lsE '^[^#]*{URI}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
        "/etc/apt/sources.list.d/*.sources"
    ).stdout.split()
    assert active == [SOURCE]
    # apt agrees: one source of the repository, read without a conflict
    update = host.run("apt-get update 2>&1")
    assert update.rc == 0 and "Conflicting" not in update.stdout, update.stdout


# prepare.yml installed cuDNN from the cuda-keyring source at the locked version, nothing held: cudnn took it over.
@pytest.mark.parametrize("pkg", ["libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"])
def test_packages_from_the_other_source_taken_over_held_and_pinned(host, pkg):
    assert_locked(host, pkg, "9.10.2.21-1", "/etc/apt/preferences.d/gpufleet-cudnn.pref")


def test_packages_taken_over_without_a_reinstall(host):
    # dpkg rewrites a package's file list when it installs it again
    before = host.file("/root/gpufleet-cudnn-list.mtime").content_string.strip()
    now = host.run("stat -c %Y /var/lib/dpkg/info/libcudnn9-cuda-12*.list").stdout.strip()
    assert now == before
