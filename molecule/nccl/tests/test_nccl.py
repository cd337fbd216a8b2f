"""nccl: libnccl2/libnccl-dev 2.26.2-1+cuda12.8, pinned and held, nccl.h macros, /etc/nccl.conf rendered from the
node's topology (a real 8x H200 matrix) and the stack's networks."""

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


def test_nccl_conf_from_topology_and_networks(host):
    f = host.file("/etc/nccl.conf")
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644)
    lines = f.content_string.splitlines()
    settings = [ln for ln in lines if ln and not ln.startswith("#")]
    assert settings == [
        # The HCA nearest each GPU, GPU0..GPU7: mlx5_1/2/7/8 reach GPUs only through NODE (front-end, storage).
        "NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11",
        # eth0 holds the node's address on the data network (the Docker bridge here), not the management one.
        "NCCL_SOCKET_IFNAME==eth0",
        "NCCL_DEBUG=WARN",
        "NCCL_IB_DISABLE=0",
    ]
    # Each setting has its reason on the line above; NVLS and NCCL_ALGO stay at NCCL's defaults on this NVSwitch board.
    assert all(lines[i - 1].startswith("# ") for i, ln in enumerate(lines) if ln in settings)
    nvls = "# NVSwitch board (NV18 between every GPU pair): NVLS (NVLink SHARP) stays at NCCL's default"
    assert any(ln.startswith(nvls) for ln in lines)
    assert not any(s.startswith(("NCCL_ALGO", "NCCL_NVLS_ENABLE")) for s in settings)
