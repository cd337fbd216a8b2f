"""After the plain converge: the interrupted upgrade is finished, at B, held; dpkg clean; reboot still required."""

import pytest
from nodestate import assert_locked, driver_packages

A, B = "570.133.20", "570.172.08"
PREF = "/etc/apt/preferences.d/gpufleet-nvidia-driver.pref"


def test_dpkg_has_nothing_left_to_finish(host):
    audit = host.run("dpkg --audit")
    assert audit.rc == 0 and audit.stdout.strip() == "", audit.stdout
    journal = host.run("ls /var/lib/dpkg/updates")
    assert [n for n in journal.stdout.split() if n.isdigit()] == []


@pytest.mark.parametrize("pkg", driver_packages(B, "open"))
def test_driver_package_at_b_configured_and_held(host, pkg):
    assert_locked(host, pkg, f"{B}-0ubuntu1", PREF)


def test_the_killer_was_one_shot_and_the_reinstall_brought_the_package_s_own_scripts(host):
    # The planted postrm removed itself; the fixture package ships none, so none is left.
    assert not host.file("/var/lib/dpkg/info/nvidia-utils-570.postrm").exists
    assert host.file("/usr/lib/gpusim/driver-version").content_string.strip() == B


def test_apt_works_again(host):
    r = host.run("apt-get install -y -q -s nvidia-utils-570")
    assert r.rc == 0 and "dpkg was interrupted" not in r.stdout + r.stderr


def test_reboot_still_required_for_the_module(host):
    # Recovery finishes the packages; the loaded module stays A until a reboot, as the role reports.
    r = host.run("nvidia-smi -L")
    assert r.rc == 18 and "Driver/library version mismatch" in r.stdout + r.stderr
    marker = host.file("/run/gpufleet/nvidia-driver.reboot-required")
    assert marker.content_string.strip() == f"loaded {A} installed {B}"
