"""nvidia_driver: exact versions, holds, pins, blacklist, fabric manager, nouveau, persistence (on the simulator).

Fabric manager is left to detection here (no nvidia_fabricmanager_required): the simulated HGX H100 board
reports a Fabric state once the driver's nvidia-smi is installed.
"""

import pytest
from nodestate import assert_locked, driver_packages, query_gpus

VERSION = "570.172.08"
APT_VERSION = f"{VERSION}-0ubuntu1"
PACKAGES = driver_packages(VERSION, "open")
FM_PACKAGES = ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]
FM_APT_VERSION = f"{VERSION}-1"
PREF = "/etc/apt/preferences.d/gpufleet-nvidia-driver.pref"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_held_and_pinned(host, pkg):
    assert_locked(host, pkg, APT_VERSION, PREF)


def test_unattended_upgrades_blacklist(host):
    text = host.file("/etc/apt/apt.conf.d/51gpufleet-nvidia-blacklist").content_string
    assert '"^nvidia\\-driver\\-570\\-open$";' in text
    assert '"^nvidia\\-fabricmanager\\-570$";' in text
    assert text.count('";') == len(PACKAGES) + len(FM_PACKAGES)


def test_repository_is_signed(host):
    src = host.file("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list").content_string
    assert "[signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc]" in src
    assert "trusted=yes" not in src
    assert host.file("/etc/apt/keyrings/cuda-archive-keyring.asc").contains("BEGIN PGP PUBLIC KEY BLOCK")


def test_persistenced_enabled_and_running(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled
    assert svc.is_running


def test_simulated_gpus_report_driver_and_persistence(host):
    gpus = query_gpus(host, "index", "driver_version", "persistence_mode")
    assert [g["index"] for g in gpus] == [str(i) for i in range(8)]
    assert {g["driver_version"] for g in gpus} == {VERSION}
    assert {g["persistence_mode"] for g in gpus} == {"Enabled"}


def test_no_reboot_pending(host):
    assert host.file("/run/gpusim/sys/module/nvidia/version").content_string.strip() == VERSION



@pytest.mark.parametrize("pkg", FM_PACKAGES)
def test_fabricmanager_and_nscq_at_exactly_the_driver_version_and_held(host, pkg):
    assert_locked(host, pkg, FM_APT_VERSION, PREF)


def test_fabricmanager_running_and_fabric_up(host):
    svc = host.service("nvidia-fabricmanager")
    assert svc.is_enabled
    assert svc.is_running
    q = host.run("nvidia-smi -q")
    assert q.rc == 0
    states = [ln.split(":", 1)[1].strip() for ln in q.stdout.splitlines() if ln.strip().startswith("State ")]
    assert states and set(states) == {"Completed"}, states


def test_nouveau_blacklisted(host):
    lines = host.file("/etc/modprobe.d/blacklist-nouveau.conf").content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_no_reboot_marker(host):
    assert not host.file("/run/gpufleet/nvidia-driver.reboot-required").exists
