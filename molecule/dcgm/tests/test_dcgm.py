"""dcgm: exact versions with epoch, holds, pins, nv-hostengine running, dcgmi sees the simulated board."""

import re

import pytest
from nodestate import assert_locked, installed_version, query_gpus

APT_VERSION = "1:4.4.1-1"
PACKAGES = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12", "datacenter-gpu-manager-4-proprietary"]
PREF = "/etc/apt/preferences.d/gpufleet-dcgm.pref"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_held_and_pinned(host, pkg):
    assert_locked(host, pkg, APT_VERSION, PREF)


def test_only_the_plugin_of_the_locked_cuda_major(host):
    assert installed_version(host, "datacenter-gpu-manager-4-cuda13") is None


def test_hostengine_enabled_and_running(host):
    svc = host.service("nvidia-dcgm")
    assert svc.is_enabled
    assert svc.is_running
    assert host.run("nv-hostengine --version").stdout.strip() == "version: 4.4.1"


def test_dcgmi_discovers_every_gpu(host):
    r = host.run("dcgmi discovery -l")
    assert r.rc == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "8 GPUs found."
    uuids = re.findall(r"Device UUID: (\S+)", r.stdout)
    assert uuids == [g["uuid"] for g in query_gpus(host, "uuid")]
