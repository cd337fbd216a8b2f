"""nvidia_repo: the fixture repository is consumed through its key with signed-by, and resolves."""

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
