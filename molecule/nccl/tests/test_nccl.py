"""nccl: libnccl2/libnccl-dev 2.26.2-1+cuda12.8, pinned and held, nccl.h macros, /etc/nccl.conf rendered sorted."""

import re

import pytest
from nodestate import assert_locked

VERSION = "2.26.2-1+cuda12.8"
PACKAGES = ["libnccl2", "libnccl-dev"]
PREF = "/etc/apt/preferences.d/gpufleet-nccl.pref"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_held_and_pinned(host, pkg):
    assert_locked(host, pkg, VERSION, PREF)


def test_header_version_macros(host):
    text = host.file("/usr/include/nccl.h").content_string
    macros = dict(re.findall(r"^#define (NCCL_MAJOR|NCCL_MINOR|NCCL_PATCH) (\d+)$", text, re.M))
    assert macros == {"NCCL_MAJOR": "2", "NCCL_MINOR": "26", "NCCL_PATCH": "2"}


def test_nccl_conf_is_the_sorted_settings(host):
    f = host.file("/etc/nccl.conf")
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)
    settings = [ln for ln in f.content_string.splitlines() if not ln.startswith("#")]
    assert settings == [
        "NCCL_DEBUG=WARN",
        "NCCL_IB_DISABLE=0",
        "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",
        "NCCL_NVLS_ENABLE=1",
        "NCCL_SOCKET_IFNAME==eth0",
    ]
