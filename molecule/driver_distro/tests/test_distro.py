"""distro source, real Debian packages: upgraded to 535.309.01-0+deb12u1, pinned, held, no NVIDIA repo."""

import pytest
from nodestate import installed_version, selection

B = "535.309.01-0+deb12u1"
PACKAGES = ["nvidia-smi", "libnvidia-ml1", "libcuda1"]
# Pulled in by the packages above with (= version); pinned through the src:nvidia-graphics-drivers stanza.
CO_VERSIONED = ["nvidia-alternative", "libnvidia-ptxjitcompiler1", "libnvidia-pkcs11-openssl3", "nvidia-legacy-check"]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_requested_package_upgraded_and_held(host, pkg):
    assert installed_version(host, pkg) == B
    assert selection(host, pkg) == "hold"


@pytest.mark.parametrize("pkg", CO_VERSIONED)
def test_co_versioned_dependency_follows(host, pkg):
    assert installed_version(host, pkg) == B


def test_pins(host):
    pref = host.file("/etc/apt/preferences.d/gpufleet-nvidia-driver.pref").content_string
    for pkg in PACKAGES:
        assert f"Package: {pkg}\nPin: version {B}\nPin-Priority: 1001" in pref
    assert f"Package: src:nvidia-graphics-drivers\nPin: version {B}\nPin-Priority: 1001" in pref
    assert "535.261.03" not in pref
    policy = host.run("apt-cache policy nvidia-alternative").stdout
    assert f"*** {B} 1001" in policy


def test_components_enabled_by_the_role(host):
    src = host.file("/etc/apt/sources.list.d/gpufleet-nvidia-distro.sources").content_string
    assert src.count("Components: contrib non-free non-free-firmware") == 2
    assert "Suites: bookworm-security" in src
    assert not host.file("/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list").exists


def test_unattended_upgrades_blacklist(host):
    text = host.file("/etc/apt/apt.conf.d/51gpufleet-nvidia-blacklist").content_string
    assert '"^nvidia\\-smi$";' in text


def test_no_fabric_manager_and_no_gpu(host):
    assert installed_version(host, "nvidia-fabricmanager") is None
    # No GPU in the container: Debian's nvidia-smi cannot talk to a driver, and the role did not pretend otherwise.
    assert host.run("nvidia-smi -L").rc != 0
    assert not host.file("/run/gpufleet/nvidia-driver.reboot-required").exists
