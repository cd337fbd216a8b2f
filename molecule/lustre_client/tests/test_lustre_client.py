"""lustre_client: Whamcloud's client packages at the lock's version, pinned and held; LNet on o2ib over the data
network's interface (an InfiniBand pool); the stack's datasets and checkpoints as separate /etc/fstab entries with
explicit options. The fstab entries stand in for the mounts (an unprivileged container cannot mount; see
molecule.yml)."""

import pytest
from nodestate import assert_locked

from gpufleet.lock.layer import default_lock
from gpufleet.lock.packages import lustre_client_packages

PACKAGES = lustre_client_packages(default_lock())
PREF = "/etc/apt/preferences.d/gpufleet-lustre-client.pref"
MGS = "10.0.0.5@o2ib:10.0.0.6@o2ib"


def test_versions_are_the_lock_s():
    assert PACKAGES == [("lustre-client-utils", "2.15.6-1"), ("lustre-client-modules-dkms", "2.15.6-1")]


@pytest.mark.parametrize(("pkg", "version"), PACKAGES)
def test_package_installed_held_and_pinned(host, pkg, version):
    assert_locked(host, pkg, version, PREF)


def test_source_trusted_through_its_key(host):
    lines = [ln for ln in host.file("/etc/apt/sources.list.d/gpufleet-lustre.list").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert lines == ["deb [signed-by=/etc/apt/keyrings/gpufleet-lustre.asc] "
                     "file:///srv/gpufleet-repo/ubuntu2204/x86_64 /"]


def test_lnet_on_o2ib_over_the_data_network(host):
    f = host.file("/etc/modprobe.d/lnet.conf")
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)
    settings = [ln for ln in f.content_string.splitlines() if ln and not ln.startswith("#")]
    # eth0 holds the container's address in the data network (172.16.0.0/12, the Docker bridge).
    assert settings == ['options lnet networks="o2ib0(eth0)"']


def _fstab(host):
    rows = [ln.split() for ln in host.file("/etc/fstab").content_string.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#")]
    return {r[1]: r for r in rows}


def test_separate_mounts_with_explicit_options(host):
    entries = {path: row for path, row in _fstab(host).items() if row[2] == "lustre"}
    assert entries == {
        "/lustre/datasets": [f"{MGS}:/ai/datasets", "/lustre/datasets", "lustre", "_netdev,flock,ro", "0", "0"],
        "/lustre/checkpoints": [f"{MGS}:/ai/checkpoints", "/lustre/checkpoints", "lustre", "_netdev,flock", "0", "0"],
    }


@pytest.mark.parametrize("path", ["/lustre/datasets", "/lustre/checkpoints"])
def test_mount_points_exist(host, path):
    d = host.file(path)
    assert d.is_directory and (d.user, d.mode) == ("root", 0o755)
