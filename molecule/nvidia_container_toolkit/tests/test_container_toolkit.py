"""nvidia_container_toolkit: exact versions, holds, pins, and the nvidia runtime in containerd's config."""

import json

import pytest
from nodestate import assert_locked

APT_VERSION = "1.18.0-1"
PACKAGES = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
            "libnvidia-container1"]
PREF = "/etc/apt/preferences.d/gpufleet-nvidia-container-toolkit.pref"
CONFIG = "/etc/containerd/config.toml"
TOML_TO_JSON = "import json, sys, tomllib; print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))))"


def read_toml(host, path):
    r = host.run("python3 -c %s %s", TOML_TO_JSON, path)
    assert r.rc == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("pkg", PACKAGES)
def test_package_installed_held_and_pinned(host, pkg):
    assert_locked(host, pkg, APT_VERSION, PREF)


def test_ctk_reports_pinned_version(host):
    assert host.run("nvidia-ctk --version").stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.18.0"


def test_containerd_has_nvidia_runtime(host):
    f = host.file(CONFIG)
    assert f.is_file and f.user == "root" and f.mode == 0o644
    cri = read_toml(host, CONFIG)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    nvidia = cri["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    # nvidia_container_toolkit_containerd_set_as_default is false: runc stays the default.
    assert "default_runtime_name" not in cri


def test_no_scratch_left_behind(host):
    assert host.run("ls -d /tmp/*.gpufleet-ctk 2>/dev/null").stdout == ""
