"""Build the signed, flat fixture APT repository (``<out>/ubuntu2204/x86_64/``).

The repository mirrors NVIDIA's ``ubuntu2204/x86_64`` CUDA repository: a flat repo (clients use
``deb [signed-by=<key>] <url> /``) with Packages, Packages.gz, Release, InRelease, Release.gpg, the
.deb files and the public key as ``3bf863cc.pub`` (NVIDIA's key file name). The key is a throwaway
one made at build time; clients must use ``signed-by=``, never ``trusted=yes``.

Builds are cached: ``<out>/.stamp`` records a hash of the catalogue, every payload (so of the
simulator scripts too) and this builder; an unchanged rebuild only reads the stamp.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from testbed.fixture_repo.catalogue import LUSTRE_MAINTAINER, NVIDIA_MAINTAINER, Package, catalogue
from testbed.fixture_repo.payloads import Payload, payload

REPO_SUBDIR = Path("ubuntu2204/x86_64")
KEY_NAME = "3bf863cc.pub"
#: Bump when the build procedure changes in a way the content hash cannot see.
BUILD_FORMAT = 1
#: Fixed timestamps keep .deb files byte-identical between builds.
SOURCE_DATE_EPOCH = 1735689600  # 2025-01-01T00:00:00Z
#: Maintainer -> (vendor, homepage) of the upstream packages the fixture mirrors.
UPSTREAMS = {
    NVIDIA_MAINTAINER: ("NVIDIA", "https://developer.nvidia.com/cuda-zone"),
    LUSTRE_MAINTAINER: ("Whamcloud", "https://wiki.whamcloud.com/"),
}
KEY_UID = "gpufleet fixture repository (throwaway) <fixture-repo@gpufleet.invalid>"


@dataclass(frozen=True)
class RepoInfo:
    out: Path
    #: The flat repository directory (``<out>/ubuntu2204/x86_64``).
    repo_dir: Path
    #: ASCII-armored public key (``<repo_dir>/3bf863cc.pub``).
    key_file: Path
    fingerprint: str
    digest: str
    packages: int
    #: False when the stamp matched and nothing was rebuilt.
    rebuilt: bool

    def apt_source(
        self, url: str | None = None, keyring: str = "/etc/apt/keyrings/cuda-archive-keyring.asc"
    ) -> str:
        """The one-line sources.list entry for this repository (``url`` defaults to file:)."""
        return f"deb [signed-by={keyring}] {url or 'file:' + str(self.repo_dir)} /"


class BuildError(RuntimeError):
    pass


def _run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _control(pkg: Package, installed_kb: int) -> str:
    lines = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        f"Architecture: {pkg.arch}",
        f"Maintainer: {pkg.maintainer}",
        f"Installed-Size: {installed_kb}",
    ]
    for field, values in (
        ("Depends", pkg.depends),
        ("Conflicts", pkg.conflicts),
        ("Replaces", pkg.replaces),
        ("Provides", pkg.provides),
    ):
        if values:
            lines.append(f"{field}: {', '.join(values)}")
    vendor, home = UPSTREAMS.get(pkg.maintainer, ("NVIDIA", "https://developer.nvidia.com/cuda-zone"))
    lines += [
        f"Section: {pkg.section}",
        "Priority: optional",
        f"Homepage: https://github.com/gpufleet (fixture of {home})",
        f"Description: {pkg.description or pkg.name}",
    ]
    if pkg.maintainer in UPSTREAMS:
        lines += [
            " Fixture package built by gpufleet for sandbox and CI hosts; it mirrors the name, version",
            f" and relations of {vendor}'s package and installs stand-ins instead of the real software.",
        ]
    else:
        lines.append(" Part of gpufleet's GPU simulator, not of NVIDIA's repository; the stand-ins depend on it.")
    return "\n".join(lines) + "\n"


def _digest(pkgs: list[Package], payloads: list[Payload]) -> str:
    h = hashlib.sha256()
    h.update(f"format={BUILD_FORMAT}\n".encode())
    h.update(Path(__file__).read_bytes())
    for pkg, pl in zip(pkgs, payloads, strict=True):
        h.update(repr(pkg).encode())
        for name in sorted(pl.files):
            content, mode = pl.files[name]
            h.update(f"{name}:{mode}:".encode())
            h.update(hashlib.sha256(content).digest())
        h.update(repr((pl.postinst, pl.conffiles)).encode())
    return h.hexdigest()


def _build_deb(pkg: Package, pl: Payload, staging: Path, repo: Path) -> None:
    root = staging / f"{pkg.name}_{pkg.version.replace(':', '%')}"
    debian = root / "DEBIAN"
    debian.mkdir(parents=True)
    size = 0
    for name, (content, mode) in pl.files.items():
        f = root / name.lstrip("/")
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content)
        f.chmod(mode)
        size += len(content)
    (debian / "control").write_text(_control(pkg, max(1, (size + 1023) // 1024)))
    if pl.postinst:
        (debian / "postinst").write_text(pl.postinst)
        (debian / "postinst").chmod(0o755)
    if pl.conffiles:
        (debian / "conffiles").write_text("".join(f"{c}\n" for c in pl.conffiles))
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            os.utime(Path(dirpath) / n, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    _run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(repo / pkg.filename)], env=env
    )


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    env = {**os.environ, "GNUPGHOME": str(home)}
    proc = subprocess.run(
        ["gpg", "--batch", "--no-tty", *args], env=env, input=stdin, capture_output=True, check=False
    )
    if proc.returncode != 0:
        raise BuildError(f"gpg {' '.join(args)} failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def _sign(repo: Path) -> str:
    home = Path(tempfile.mkdtemp(prefix="gpufleet-gpg-"))
    try:
        home.chmod(0o700)
        _gpg(home, "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never")
        listing = _gpg(home, "--with-colons", "--list-secret-keys").decode()
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        (repo / KEY_NAME).write_bytes(_gpg(home, "--armor", "--export", fpr))
        release = str(repo / "Release")
        _gpg(
            home,
            "--yes",
            "--local-user",
            fpr,
            "--digest-algo",
            "SHA256",
            "--clearsign",
            "--output",
            str(repo / "InRelease"),
            release,
        )
        _gpg(
            home,
            "--yes",
            "--local-user",
            fpr,
            "--digest-algo",
            "SHA256",
            "--armor",
            "--detach-sign",
            "--output",
            str(repo / "Release.gpg"),
            release,
        )
        return fpr
    finally:
        subprocess.run(
            ["gpgconf", "--kill", "gpg-agent"],
            env={**os.environ, "GNUPGHOME": str(home)},
            capture_output=True,
            check=False,
        )
        shutil.rmtree(home, ignore_errors=True)


def _read_stamp(out: Path) -> dict[str, str]:
    try:
        data = json.loads((out / ".stamp").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def build_repo(out: Path, force: bool = False) -> RepoInfo:
    """Build (or reuse) the fixture repository under ``out``; returns where everything is."""
    out = out.resolve()
    repo = out / REPO_SUBDIR
    pkgs = catalogue()
    payloads = [payload(p) for p in pkgs]
    digest = _digest(pkgs, payloads)
    stamp = _read_stamp(out)
    if not force and stamp.get("digest") == digest and (repo / "InRelease").is_file():
        return RepoInfo(out, repo, repo / KEY_NAME, stamp.get("fingerprint", ""), digest, len(pkgs), False)

    for tool in ("dpkg-deb", "apt-ftparchive", "gpg"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} not found: install dpkg, apt-utils and gnupg to build the fixture repo")
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    (out / ".stamp").unlink(missing_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="gpufleet-debs-") as tmp,
        ThreadPoolExecutor(max_workers=4) as pool,
    ):
        list(pool.map(lambda pp: _build_deb(pp[0], pp[1], Path(tmp), repo), zip(pkgs, payloads, strict=True)))

    packages = _run(["apt-ftparchive", "packages", "."], cwd=repo)
    (repo / "Packages").write_text(packages)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=0) as gz:
        gz.write(packages.encode())
    release = _run(
        [
            "apt-ftparchive",
            "-o",
            "APT::FTPArchive::Release::Origin=NVIDIA",
            "-o",
            "APT::FTPArchive::Release::Label=NVIDIA CUDA",
            "-o",
            "APT::FTPArchive::Release::Architectures=amd64",
            "-o",
            "APT::FTPArchive::Release::Description=gpufleet fixture mirror of NVIDIA CUDA ubuntu2204/x86_64",
            "release",
            ".",
        ],
        cwd=repo,
    )
    (repo / "Release").write_text(release)
    fpr = _sign(repo)
    (out / ".stamp").write_text(json.dumps({"digest": digest, "fingerprint": fpr}) + "\n")
    return RepoInfo(out, repo, repo / KEY_NAME, fpr, digest, len(pkgs), True)
