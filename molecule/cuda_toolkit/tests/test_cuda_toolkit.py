"""cuda_toolkit: 12.8.1 (default) and 12.4.1 side by side, pinned, held, on PATH, in ld.so.conf, as alternatives."""

import json

import pytest
from nodestate import assert_locked

TOOLKITS = {"12.8": "12.8.1", "12.4": "12.4.1"}
DEFAULT = "12.8"
# nvcc's version per release (CUDA release notes' component tables).
NVCC = {"12.8.1": "12.8.93", "12.4.1": "12.4.131"}
PREF = "/etc/apt/preferences.d/gpufleet-cuda-toolkit.pref"


def _pkg(minor: str) -> str:
    return "cuda-toolkit-" + minor.replace(".", "-")


@pytest.mark.parametrize("minor", TOOLKITS)
def test_toolkit_installed_held_and_pinned(host, minor):
    assert_locked(host, _pkg(minor), f"{TOOLKITS[minor]}-1", PREF)


@pytest.mark.parametrize("minor", TOOLKITS)
def test_version_json_names_the_release(host, minor):
    doc = json.loads(host.file(f"/usr/local/cuda-{minor}/version.json").content_string)
    assert doc["cuda"]["version"] == TOOLKITS[minor]


def test_usr_local_cuda_nvcc_is_the_default_release(host):
    out = host.check_output("/usr/local/cuda/bin/nvcc --version")
    release = TOOLKITS[DEFAULT]
    assert f"Cuda compilation tools, release {DEFAULT}, V{NVCC[release]}" in out


def test_alternative_selects_the_default_and_lists_both(host):
    q = host.check_output("update-alternatives --query cuda")
    assert "Link: /usr/local/cuda\n" in q
    assert "Status: manual" in q
    assert f"Value: /usr/local/cuda-{DEFAULT}" in q
    assert "Alternative: /usr/local/cuda-12.8\nPriority: 1208" in q
    assert "Alternative: /usr/local/cuda-12.4\nPriority: 1204" in q
    assert host.file("/usr/local/cuda").linked_to == f"/usr/local/cuda-{DEFAULT}"


def test_login_shell_finds_nvcc_and_cuda_home(host):
    out = host.check_output("bash -lc 'echo \"$CUDA_HOME\"; command -v nvcc'").splitlines()
    assert out == ["/usr/local/cuda", "/usr/local/cuda/bin/nvcc"]


@pytest.mark.parametrize("minor", TOOLKITS)
def test_ld_so_conf_lists_the_toolkit_libraries(host, minor):
    conf = host.file(f"/etc/ld.so.conf.d/cuda-{minor.replace('.', '-')}.conf")
    lines = [ln for ln in conf.content_string.splitlines() if ln and not ln.startswith("#")]
    assert lines == [f"/usr/local/cuda-{minor}/lib64"]
    # The handler ran ldconfig after the entry was written.
    assert host.file("/etc/ld.so.cache").mtime >= conf.mtime
