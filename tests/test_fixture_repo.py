"""The signed fixture APT repository: index contents, signature, package payloads, caching, apt."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from testbed.fixture_repo import RepoInfo, build_repo, catalogue
from testbed.fixture_repo.payloads import payload
from testbed.fixture_repo.simulator import SIMULATOR_DIR

pytestmark = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("dpkg-deb", "apt-ftparchive", "gpg", "gpgv", "apt-get")),
    reason="needs dpkg-deb, apt-ftparchive (apt-utils), gpg and gpgv",
)

# Written out from docs/architecture.md ("Fixture NVIDIA repository") rather than taken from the
# catalogue, so that a catalogue drifting from the contract fails here.
U, N = "-0ubuntu1", "-1"
EXPECTED: set[tuple[str, str]] = set()
for _b, _vs in {
    "550": ("550.144.03", "550.163.01"),
    "570": ("570.133.20", "570.172.08"),
    "580": ("580.65.06", "580.95.05"),
}.items():
    for _v in _vs:
        EXPECTED |= {
            (f"nvidia-driver-{_b}", _v + U),
            (f"nvidia-driver-{_b}-open", _v + U),
            (f"cuda-drivers-{_b}", _v + N),
            (f"libnvidia-compute-{_b}", _v + U),
            (f"nvidia-utils-{_b}", _v + U),
            (f"nvidia-compute-utils-{_b}", _v + U),
        }
        if _b == "580":
            EXPECTED |= {
                ("nvidia-fabricmanager", _v + N),
                ("libnvidia-nscq", _v + N),
                ("nvidia-driver-pinning-580", _v + N),
            }
        else:
            EXPECTED |= {
                (f"nvidia-fabricmanager-{_b}", _v + N),
                (f"libnvidia-nscq-{_b}", _v + N),
                (f"cuda-drivers-fabricmanager-{_b}", _v + N),
            }
for _v in ("590.44.01", "590.48.01"):
    EXPECTED |= {
        ("nvidia-driver", _v + U),
        ("nvidia-driver-open", _v + U),
        ("cuda-drivers", _v + N),
        ("nvidia-fabricmanager", _v + N),
        ("libnvidia-nscq", _v + N),
        ("libnvidia-compute", _v + U),
        ("nvidia-utils", _v + U),
        ("nvidia-driver-pinning-590", _v + N),
    }
EXPECTED |= {
    ("cuda-toolkit-12-4", "12.4.1-1"),
    ("cuda-toolkit-12-8", "12.8.0-1"),
    ("cuda-toolkit-12-8", "12.8.1-1"),
    ("cuda-toolkit-12-9", "12.9.0-1"),
    ("cuda-toolkit-12-9", "12.9.1-1"),
    ("cuda-toolkit-13-0", "13.0.0-1"),
    ("cuda-toolkit-13-0", "13.0.2-1"),
}
for _n, _vs in {"12": ("9.8.0.87-1", "9.10.2.21-1"), "13": ("9.12.0.46-1", "9.13.0.50-1")}.items():
    for _v in _vs:
        EXPECTED |= {(f"libcudnn9-cuda-{_n}", _v), (f"libcudnn9-dev-cuda-{_n}", _v)}
for _v in (
    "2.21.5-1+cuda12.4",
    "2.25.1-1+cuda12.8",
    "2.26.2-1+cuda12.8",
    "2.26.5-1+cuda12.9",
    "2.27.3-1+cuda12.9",
    "2.27.7-1+cuda13.0",
    "2.28.3-1+cuda13.0",
):
    EXPECTED |= {("libnccl2", _v), ("libnccl-dev", _v)}
for _v in ("1:4.2.3-1", "1:4.4.1-1"):
    EXPECTED |= {(f"datacenter-gpu-manager-4-{x}", _v) for x in ("core", "cuda12", "cuda13", "proprietary")}
for _v in ("1.17.8-1", "1.18.0-1"):
    EXPECTED |= {
        (n, _v)
        for n in (
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
        )
    }

# Whamcloud's Lustre client for Ubuntu 22.04 (downloads.whamcloud.com/public/lustre/lustre-2.15.<n>/ubuntu2204/client/).
for _v in ("2.15.5-1", "2.15.6-1"):
    EXPECTED |= {("lustre-client-utils", _v), ("lustre-client-modules-dkms", _v)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    return build_repo(tmp_path_factory.mktemp("fixture-repo"))


def _stanzas(repo: RepoInfo) -> list[dict[str, str]]:
    out = []
    for block in (repo.repo_dir / "Packages").read_text().strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line.startswith(" "):
                k, _, v = line.partition(": ")
                fields[k] = v
        out.append(fields)
    return out


def _find(repo: RepoInfo, name: str, version: str) -> dict[str, str]:
    return next(s for s in _stanzas(repo) if s["Package"] == name and s["Version"] == version)


def test_lustre_client_packages_mirror_whamcloud_s(repo: RepoInfo) -> None:
    dkms = _find(repo, "lustre-client-modules-dkms", "2.15.6-1")
    assert dkms["Depends"] == "lustre-client-utils"
    assert dkms["Maintainer"].startswith("Lustre Developers")
    assert "Whamcloud's package" in (repo.repo_dir / "Packages").read_text()


def test_index_lists_every_version_of_the_table(repo: RepoInfo) -> None:
    listed = {(s["Package"], s["Version"]) for s in _stanzas(repo)}
    assert sorted(EXPECTED - listed) == []
    names = {n for n, _ in listed}
    # 590 drops the branch suffix; 580 drops it for fabric manager / NSCQ only.
    assert not names & {
        "nvidia-driver-590",
        "cuda-drivers-590",
        "nvidia-fabricmanager-580",
        "libnvidia-nscq-580",
        "cuda-drivers-fabricmanager-580",
    }
    assert {
        "nvidia-driver-580-open",
        "nvidia-utils-580",
        "nvidia-dkms-open",
        "nvidia-kernel-source-open",
    } <= names


def test_depends_relations(repo: RepoInfo) -> None:
    v = "570.133.20-0ubuntu1"
    drv = _find(repo, "nvidia-driver-570-open", v)["Depends"].split(", ")
    assert drv == [
        f"{n} (= {v})"
        for n in (
            "libnvidia-compute-570",
            "libnvidia-cfg1-570",
            "libnvidia-common-570",
            "nvidia-utils-570",
            "nvidia-compute-utils-570",
            "nvidia-kernel-common-570",
            "nvidia-dkms-570-open",
            "nvidia-kernel-source-570-open",
        )
    ]
    assert _find(repo, "cuda-drivers-570", "570.133.20-1")["Depends"] == (
        "nvidia-driver-570-open (>= 570.133.20) | nvidia-driver-570 (>= 570.133.20)"
    )
    assert _find(repo, "cuda-drivers", "590.48.01-1")["Depends"] == (
        "nvidia-driver-open (>= 590.48.01) | nvidia-driver (>= 590.48.01)"
    )
    assert (
        "libnvidia-compute (= 590.44.01-0ubuntu1)"
        in _find(repo, "nvidia-driver", "590.44.01-0ubuntu1")["Depends"]
    )
    assert _find(repo, "cuda-drivers-fabricmanager-550", "550.163.01-1")["Depends"] == (
        "cuda-drivers-550 (= 550.163.01-1), nvidia-fabricmanager-550 (= 550.163.01-1)"
    )
    assert _find(repo, "libnccl-dev", "2.27.3-1+cuda12.9")["Depends"] == "libnccl2 (= 2.27.3-1+cuda12.9)"
    assert (
        _find(repo, "libcudnn9-dev-cuda-12", "9.10.2.21-1")["Depends"] == "libcudnn9-cuda-12 (= 9.10.2.21-1)"
    )
    dcgm = _find(repo, "datacenter-gpu-manager-4-core", "1:4.4.1-1")
    assert dcgm["Filename"] == "./datacenter-gpu-manager-4-core_4.4.1-1_amd64.deb"
    assert _find(repo, "libnvidia-common-570", "570.172.08-0ubuntu1")["Architecture"] == "all"


def test_every_dependency_is_in_the_repo_or_debian_base(repo: RepoInfo) -> None:
    stanzas = _stanzas(repo)
    available = {s["Package"] for s in stanzas} | {"python3", "runc"}
    for s in stanzas:
        for alt in s.get("Depends", "").split(","):
            for dep in alt.split("|"):
                name = dep.strip().split(" ")[0]
                if name:
                    assert name in available, f"{s['Package']} depends on {name}"


def test_inrelease_signature_verifies_with_the_published_key(repo: RepoInfo, tmp_path: Path) -> None:
    armored = repo.key_file.read_text()
    assert repo.key_file.name == "3bf863cc.pub"
    assert armored.startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    keyring = tmp_path / "key.gpg"
    env = {**os.environ, "GNUPGHOME": str(tmp_path)}
    subprocess.run(
        ["gpg", "--batch", "--dearmor", "--output", str(keyring), str(repo.key_file)], env=env, check=True
    )
    ok = subprocess.run(
        ["gpgv", "--keyring", str(keyring), str(repo.repo_dir / "InRelease")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "Good signature" in ok.stderr
    detached = subprocess.run(
        [
            "gpgv",
            "--keyring",
            str(keyring),
            str(repo.repo_dir / "Release.gpg"),
            str(repo.repo_dir / "Release"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert detached.returncode == 0, detached.stderr
    tampered = tmp_path / "Release"
    tampered.write_text((repo.repo_dir / "Release").read_text().replace("Origin: NVIDIA", "Origin: evil"))
    bad = subprocess.run(
        ["gpgv", "--keyring", str(keyring), str(repo.repo_dir / "Release.gpg"), str(tampered)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode != 0


def _extract(repo: RepoInfo, name: str, version: str, dest: Path) -> Path:
    deb = repo.repo_dir / _find(repo, name, version)["Filename"]
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


def test_nvidia_utils_ships_the_simulator(repo: RepoInfo, tmp_path: Path) -> None:
    deb = repo.repo_dir / "nvidia-utils-570_570.133.20-0ubuntu1_amd64.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/bin/nvidia-smi\n" in listing and "./usr/lib/gpusim/gpusim.py\n" in listing
    assert "-rwxr-xr-x root/root" in next(
        line for line in listing.splitlines() if line.endswith("/nvidia-smi")
    )
    root = _extract(repo, "nvidia-utils-570", "570.133.20-0ubuntu1", tmp_path / "root")
    assert (root / "usr/lib/gpusim/gpusim.py").read_bytes() == (SIMULATOR_DIR / "gpusim.py").read_bytes()
    assert (root / "usr/lib/gpusim/driver-version").read_text() == "570.133.20\n"
    assert (
        root / "usr/bin/nvidia-smi"
    ).read_text() == '#!/bin/sh\nexec python3 /usr/lib/gpusim/gpusim.py "$@"\n'
    r = subprocess.run(
        [
            sys.executable,
            str(root / "usr/lib/gpusim/gpusim.py"),
            "--query-gpu=driver_version",
            "--format=csv,noheader",
            "-i",
            "0",
        ],
        env={**os.environ, "GPUSIM_ROOT": str(root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.stdout == "570.133.20\n"


def test_compute_utils_ships_persistenced_unit(repo: RepoInfo, tmp_path: Path) -> None:
    root = _extract(repo, "nvidia-compute-utils-580", "580.95.05-0ubuntu1", tmp_path / "root")
    unit = (root / "lib/systemd/system/nvidia-persistenced.service").read_text()
    assert "Type=forking\n" in unit and "PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid\n" in unit
    assert (root / "usr/lib/gpusim/persistenced.py").read_bytes() == (SIMULATOR_DIR / "persistenced.py").read_bytes()
    control = subprocess.run(
        [
            "dpkg-deb",
            "-I",
            str(repo.repo_dir / "nvidia-compute-utils-580_580.95.05-0ubuntu1_amd64.deb"),
            "postinst",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "[ -d /run/systemd/system ]" in control and "systemctl daemon-reload" in control


@pytest.mark.parametrize(
    ("name", "version", "standin", "pidfile"),
    [
        ("nvidia-compute-utils-580", "580.95.05-0ubuntu1", "persistenced.py",
         "run/nvidia-persistenced/nvidia-persistenced.pid"),
        ("nvidia-fabricmanager-570", "570.172.08-1", "fabricmanager.py",
         "run/nvidia-fabricmanager/nv-fabricmanager.pid"),
    ],
)
def test_daemon_standins_run_from_their_package_and_the_common_one(
    repo: RepoInfo, tmp_path: Path, name: str, version: str, standin: str, pidfile: str
) -> None:
    # Both packages are installed together on NVSwitch nodes, so the daemonizing code they share ships once,
    # in gpusim-common, which both depend on (dpkg refuses a path owned by two packages).
    assert "gpusim-common" in [d.split(" ")[0] for d in _find(repo, name, version)["Depends"].split(", ")]
    root = _extract(repo, name, version, tmp_path / "root")
    installed = root / "usr/lib/gpusim" / standin
    assert installed.read_bytes() == (SIMULATOR_DIR / standin).read_bytes()
    assert [p.name for p in installed.parent.iterdir()] == [standin]
    # -E -s -S: no PYTHONPATH, no user or system site-packages; the standard library and the script's
    # directory only. Without the common package the script cannot start ...
    cmd = [sys.executable, "-E", "-s", "-S", str(installed)]
    env = {**os.environ, "GPUSIM_ROOT": str(root)}
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert r.returncode == 1 and "No module named 'gpusim_daemon'" in r.stderr
    # ... with it unpacked into the same root, it daemonizes and stops on SIGTERM.
    common = _find(repo, "gpusim-common", "1.0-1")
    assert common["Architecture"] == "all" and common["Depends"] == "python3"
    _extract(repo, "gpusim-common", "1.0-1", root)
    assert (root / "usr/lib/gpusim/gpusim_daemon.py").read_bytes() == (SIMULATOR_DIR / "gpusim_daemon.py").read_bytes()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert (r.returncode, r.stderr) == (0, "")
    os.kill(int((root / pidfile).read_text()), signal.SIGTERM)
    end = time.monotonic() + 10
    while (root / pidfile).exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not (root / pidfile).exists()


def test_the_simulator_package_is_not_passed_off_as_nvidias(repo: RepoInfo) -> None:
    common = _find(repo, "gpusim-common", "1.0-1")
    assert "nvidia" not in common["Maintainer"].lower()
    assert _find(repo, "nvidia-utils-570", "570.133.20-0ubuntu1")["Maintainer"].startswith("NVIDIA CORPORATION")


def _relations(field: tuple[str, ...]) -> set[str]:
    return {alt.strip().split(" ")[0] for rel in field for alt in rel.split("|")}


def test_no_path_is_owned_by_two_packages_that_can_be_installed_together() -> None:
    # dpkg's rule, checked on the whole catalogue: two package names owning one path must conflict (by
    # name or by a virtual package one provides), as the driver branches' nvidia-smi owners do.
    pkgs = catalogue()
    owners: dict[str, set[str]] = {}
    for pkg in pkgs:
        for path in payload(pkg).files:
            owners.setdefault(path, set()).add(pkg.name)
    conflicts = {p.name: _relations(p.conflicts) for p in pkgs}
    provides = {p.name: {p.name} | _relations(p.provides) for p in pkgs}
    clashes = [
        (path, a, b)
        for path, names in owners.items()
        for a in sorted(names)
        for b in sorted(names)
        if a < b and not (conflicts[a] & provides[b] or conflicts[b] & provides[a])
    ]
    assert clashes == []
    assert owners["/usr/lib/gpusim/gpusim_daemon.py"] == {"gpusim-common"}


def test_cuda_toolkit_nvcc_and_version_json(repo: RepoInfo, tmp_path: Path) -> None:
    root = _extract(repo, "cuda-toolkit-12-8", "12.8.1-1", tmp_path / "root")
    doc = json.loads((root / "usr/local/cuda-12.8/version.json").read_text())
    assert doc["cuda"] == {"name": "CUDA SDK", "version": "12.8.1"}
    out = subprocess.run(
        ["sh", str(root / "usr/local/cuda-12.8/bin/nvcc"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
    assert "Cuda compilation tools, release 12.8, V12.8.93\n" in out


def test_nccl_and_cudnn_headers(repo: RepoInfo, tmp_path: Path) -> None:
    root = _extract(repo, "libnccl-dev", "2.26.5-1+cuda12.9", tmp_path / "nccl")
    h = (root / "usr/include/nccl.h").read_text()
    assert "#define NCCL_MAJOR 2\n#define NCCL_MINOR 26\n#define NCCL_PATCH 5\n" in h
    assert "#define NCCL_VERSION_CODE 22605\n" in h
    lib = _extract(repo, "libnccl2", "2.26.5-1+cuda12.9", tmp_path / "nccl")
    assert (lib / "usr/lib/x86_64-linux-gnu/libnccl.so.2.26.5").is_file()
    cud = _extract(repo, "libcudnn9-dev-cuda-13", "9.13.0.50-1", tmp_path / "cudnn")
    assert (
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 13\n#define CUDNN_PATCHLEVEL 0\n"
        in (cud / "usr/include/cudnn_version.h").read_text()
    )


def test_nvidia_ctk_configures_containerd(repo: RepoInfo, tmp_path: Path) -> None:
    root = _extract(repo, "nvidia-container-toolkit-base", "1.17.8-1", tmp_path / "root")
    ctk = root / "usr/bin/nvidia-ctk"
    version = subprocess.run(
        [sys.executable, str(ctk), "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.17.8"
    cfg = tmp_path / "containerd/config.toml"
    cfg.parent.mkdir()
    cfg.write_text('version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause:3.9"\n')
    r = subprocess.run(
        [
            sys.executable,
            str(ctk),
            "runtime",
            "configure",
            "--runtime=containerd",
            f"--config={cfg}",
            "--set-as-default",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"Wrote updated config to {cfg}" in r.stderr
    doc = tomllib.loads(cfg.read_text())
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "pause:3.9"
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime"}


def test_second_build_is_skipped_by_the_stamp(repo: RepoInfo) -> None:
    start = time.monotonic()
    again = build_repo(repo.out)
    assert time.monotonic() - start < 1.0
    assert again.rebuilt is False
    assert (again.digest, again.fingerprint) == (repo.digest, repo.fingerprint)
    assert json.loads((repo.out / ".stamp").read_text())["digest"] == repo.digest


def test_build_output_is_deterministic(repo: RepoInfo, tmp_path: Path) -> None:
    other = build_repo(tmp_path / "other")
    assert other.rebuilt is True
    assert (other.repo_dir / "Packages").read_text() == (repo.repo_dir / "Packages").read_text()
    assert other.fingerprint != repo.fingerprint  # a fresh throwaway key every cold build


# --- apt itself, without root --------------------------------------------------------------------


@pytest.fixture(scope="module")
def apt(repo: RepoInfo, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    d = tmp_path_factory.mktemp("apt")
    for sub in (
        "etc/sources.list.d",
        "etc/preferences.d",
        "etc/apt.conf.d",
        "state/lists/partial",
        "cache/archives/partial",
    ):
        (d / sub).mkdir(parents=True)
    # Debian 12 base packages the fixture packages may depend on.
    (d / "state/status").write_text(
        "Package: python3\nStatus: install ok installed\nPriority: optional\nArchitecture: amd64\n"
        "Version: 3.11.2-1+b1\nDescription: stub\n"
    )
    (d / "etc/sources.list").write_text(repo.apt_source(keyring=str(repo.key_file)) + "\n")
    opts = [
        f"-oDir::Etc::sourcelist={d}/etc/sources.list",
        f"-oDir::Etc::sourceparts={d}/etc/sources.list.d",
        f"-oDir::Etc::preferencesparts={d}/etc/preferences.d",
        f"-oDir::Etc::preferences={d}/etc/preferences",
        f"-oDir::Etc::Parts={d}/etc/apt.conf.d",
        f"-oDir::State={d}/state",
        f"-oDir::State::status={d}/state/status",
        f"-oDir::Cache={d}/cache",
        "-oAPT::Architecture=amd64",
        "-oDebug::NoLocking=1",
    ]
    up = subprocess.run(["apt-get", *opts, "update"], capture_output=True, text=True, check=False)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "NO_PUBKEY" not in up.stderr and "not signed" not in up.stderr
    return opts


def test_apt_needs_every_co_versioned_package_pinned(apt: list[str]) -> None:
    v = "570.133.20-0ubuntu1"
    lone = subprocess.run(
        ["apt-get", *apt, "-s", "install", f"nvidia-driver-570-open={v}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lone.returncode != 0
    assert f"Depends: libnvidia-compute-570 (= {v}) but 570.172.08-0ubuntu1 is to be installed" in lone.stdout
    members = [
        "nvidia-driver-570-open",
        "libnvidia-compute-570",
        "libnvidia-cfg1-570",
        "libnvidia-common-570",
        "nvidia-utils-570",
        "nvidia-compute-utils-570",
        "nvidia-kernel-common-570",
        "nvidia-dkms-570-open",
        "nvidia-kernel-source-570-open",
    ]
    full = subprocess.run(
        ["apt-get", *apt, "-s", "install", *(f"{m}={v}" for m in members)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert full.returncode == 0, full.stdout + full.stderr
    for m in members:
        assert f"Inst {m} ({v} " in full.stdout


def test_apt_policy_shows_both_versions(apt: list[str]) -> None:
    out = subprocess.run(
        ["apt-cache", *apt, "policy", "nvidia-driver-570-open"], capture_output=True, text=True, check=True
    ).stdout
    assert "Candidate: 570.172.08-0ubuntu1" in out
    assert "     570.172.08-0ubuntu1 500\n" in out and "     570.133.20-0ubuntu1 500\n" in out


def test_branches_exclude_each_other(apt: list[str]) -> None:
    both = subprocess.run(
        ["apt-get", *apt, "-s", "install", "nvidia-utils-570", "nvidia-utils-580"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert both.returncode != 0
    assert "Conflicts: nvidia-utils" in both.stdout
