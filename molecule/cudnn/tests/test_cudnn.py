"""cudnn: cuDNN 9.10.2.21 for CUDA 12, runtime and headers at the exact version, pinned and held."""

import re

import pytest
from nodestate import installed_version, selection

VERSION = "9.10.2.21"
APT_VERSION = f"{VERSION}-1"
PACKAGES = ["libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"]


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_at_pinned_version(host, pkg):
    assert installed_version(host, pkg) == APT_VERSION


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_held(host, pkg):
    assert selection(host, pkg) == "hold"


def test_other_cuda_major_build_absent(host):
    assert installed_version(host, "libcudnn9-cuda-13") is None


@pytest.mark.parametrize("pkg", PACKAGES)
def test_pinned_at_1001(host, pkg):
    pref = host.file("/etc/apt/preferences.d/gpufleet-cudnn.pref").content_string
    assert f"Package: {pkg}\nPin: version {APT_VERSION}\nPin-Priority: 1001" in pref
    assert f"*** {APT_VERSION} 1001" in host.run("apt-cache policy %s", pkg).stdout


def test_header_version_macros(host):
    text = host.file("/usr/include/cudnn_version.h").content_string
    macros = dict(re.findall(r"^#define (CUDNN_MAJOR|CUDNN_MINOR|CUDNN_PATCHLEVEL) (\d+)$", text, re.M))
    major, minor, patch = VERSION.split(".")[:3]
    assert macros == {"CUDNN_MAJOR": major, "CUDNN_MINOR": minor, "CUDNN_PATCHLEVEL": patch}
