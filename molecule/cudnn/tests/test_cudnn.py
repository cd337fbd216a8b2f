"""cudnn: cuDNN 9.10.2.21 for CUDA 12, runtime and headers at the exact version, pinned and held."""

import re

import pytest
from nodestate import assert_locked, installed_version

VERSION = "9.10.2.21"
APT_VERSION = f"{VERSION}-1"
PACKAGES = ["libcudnn9-cuda-12", "libcudnn9-dev-cuda-12"]
PREF = "/etc/apt/preferences.d/gpufleet-cudnn.pref"


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_held_and_pinned(host, pkg):
    assert_locked(host, pkg, APT_VERSION, PREF)


def test_other_cuda_major_build_absent(host):
    assert installed_version(host, "libcudnn9-cuda-13") is None


def test_header_version_macros(host):
    text = host.file("/usr/include/cudnn_version.h").content_string
    macros = dict(re.findall(r"^#define (CUDNN_MAJOR|CUDNN_MINOR|CUDNN_PATCHLEVEL) (\d+)$", text, re.M))
    major, minor, patch = VERSION.split(".")[:3]
    assert macros == {"CUDNN_MAJOR": major, "CUDNN_MINOR": minor, "CUDNN_PATCHLEVEL": patch}
