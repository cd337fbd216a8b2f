"""nvidia_driver: exact versions, holds, pins, blacklist, persistence (asserted on the simulator)."""

import pytest
from nodestate import driver_packages, installed_version, query_gpus, selection

VERSION = "570.172.08"
APT_VERSION = f"{VERSION}-0ubuntu1"
PACKAGES = driver_packages(VERSION, "open")


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_at_pinned_version(host, pkg):
    assert installed_version(host, pkg) == APT_VERSION


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_held(host, pkg):
    assert selection(host, pkg) == "hold"


def test_pins_at_priority_1001(host):
    pref = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref").content_string
    for pkg in PACKAGES:
        assert f"Package: {pkg}\nPin: version {APT_VERSION}\nPin-Priority: 1001" in pref
    policy = host.run("apt-cache policy nvidia-driver-570-open").stdout
    assert f"*** {APT_VERSION} 1001" in policy


def test_unattended_upgrades_blacklist(host):
    text = host.file("/etc/apt/apt.conf.d/51gpufleet-nvidia-blacklist").content_string
    assert '"^nvidia\\-driver\\-570\\-open$";' in text
    assert text.count('";') == len(PACKAGES)


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
