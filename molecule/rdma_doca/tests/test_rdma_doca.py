"""rdma with DOCA 2.9.1 in the lock: every DOCA-OFED package of the release installed at the lock's version,
held and pinned (names and versions from gpufleet.lock.packages, the one place they live), the doca-ofed meta
package installed with them, nvidia-peermem in the boot module list."""

from nodestate import assert_locked, installed_version

from gpufleet.lock.packages import DOCA_OFED_META, doca_ofed_packages

PREF = "/etc/apt/preferences.d/gpufleet-rdma.pref"


def test_doca_ofed_set_locked_at_the_release(host):
    for name, version in doca_ofed_packages("2.9.1"):
        assert_locked(host, name, version, PREF)


def test_meta_package_installed(host):
    assert installed_version(host, DOCA_OFED_META) is not None


def test_peermem_loaded_at_boot(host):
    lines = [ln for ln in host.file("/etc/modules-load.d/gpufleet-rdma.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert lines == ["nvidia_peermem"]
