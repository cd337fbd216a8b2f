"""Upgrade A -> B: every package at B and held, fabric manager = driver, and "reboot required" truthfully."""

import pytest
from nodestate import driver_packages, installed_version, selection

A, B = "570.133.20", "570.172.08"
PACKAGES = driver_packages(B, "open")
FM_PACKAGES = ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_driver_package_at_b_and_held(host, pkg):
    assert installed_version(host, pkg) == f"{B}-0ubuntu1"
    assert selection(host, pkg) == "hold"


@pytest.mark.parametrize("pkg", FM_PACKAGES)
def test_fabricmanager_follows_the_driver(host, pkg):
    assert installed_version(host, pkg) == f"{B}-1"
    assert selection(host, pkg) == "hold"


def test_pins_moved_to_b(host):
    pref = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref").content_string
    assert A not in pref
    assert pref.count(f"Pin: version {B}-0ubuntu1\n") == len(PACKAGES)
    assert pref.count(f"Pin: version {B}-1\n") == len(FM_PACKAGES)


def test_gpus_fail_until_reboot(host):
    # The running module is still A: NVML refuses, exactly as on a real host after an upgrade.
    r = host.run("nvidia-smi -L")
    assert r.rc == 18, r.stdout + r.stderr
    assert "Driver/library version mismatch" in r.stdout + r.stderr
    assert host.file("/run/gpusim/sys/module/nvidia/version").content_string.strip() == A


def test_role_reports_reboot_required(host):
    marker = host.file("/run/gpufleet/nvidia-driver.reboot-required")
    assert marker.exists
    assert marker.content_string.strip() == f"loaded {A} installed {B}"


def test_no_reboot_happened(host):
    # nvidia_driver_allow_reboot is false: the simulator's module would have been reset by a reboot.
    assert host.file("/run/gpusim/sys/module/nvidia/version").exists
