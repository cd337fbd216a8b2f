"""apt_signing_key (roles/nvidia_repo): the repository key is trusted only with the lock's fingerprint."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from gpufleet import REPO_ROOT
from gpufleet.lock.render import render_ansible_vars
from gpufleet.lock.repository import NVIDIA_REPO_KEY_FINGERPRINT

BIN = Path(sys.executable).parent
needs_gpg = pytest.mark.skipif(shutil.which("gpg") is None, reason="needs gpg to make test keys")


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("apt_signing_key", REPO_ROOT / "ansible/library/apt_signing_key.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gpg_key(tmp_path: Path, algo: str) -> tuple[bytes, str]:
    home = tmp_path / f"gnupg-{algo}"
    home.mkdir(mode=0o700)
    env = os.environ | {"GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                    f"test {algo} <t@example.invalid>", algo, "sign", "never"], env=env, check=True,
                   capture_output=True, timeout=120)
    colons = subprocess.run(["gpg", "--batch", "--with-colons", "--list-keys"], env=env, check=True,
                            capture_output=True, text=True).stdout
    fpr = next(ln.split(":")[9] for ln in colons.splitlines() if ln.startswith("fpr:"))
    armored = subprocess.run(["gpg", "--batch", "--armor", "--export"], env=env, check=True,
                             capture_output=True).stdout
    return armored, fpr


@needs_gpg
@pytest.mark.parametrize("algo", ["ed25519", "rsa2048"])
def test_fingerprint_matches_gpg(tmp_path: Path, algo: str) -> None:
    armored, fpr = _gpg_key(tmp_path, algo)
    mod = _module()
    assert mod.fingerprints(armored) == [fpr]
    binary = mod._dearmor(armored)
    assert mod.fingerprints(binary) == [fpr]


def test_lock_renders_nvidias_fingerprint_once() -> None:
    from gpufleet.lock import load_lock

    _, lock = load_lock("onprem-h100")
    assert render_ansible_vars(lock)["gpufleet_nvidia_repo_key_fingerprint"] == NVIDIA_REPO_KEY_FINGERPRINT
    defaults = (REPO_ROOT / "roles/nvidia_repo/defaults/main.yml").read_text()
    assert NVIDIA_REPO_KEY_FINGERPRINT not in defaults  # one place: the lock's data
    assert "gpufleet_nvidia_repo_key_fingerprint" in defaults


PLAY = """\
- name: Install a signing key
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Install the key
      apt_signing_key:
        url: "file://{key}"
        dest: "{dest}"
        fingerprint: "{fpr}"
        mode: "0644"
      register: result
    - name: Show
      ansible.builtin.debug:
        var: result
"""


def _play(tmp_path: Path, key: Path, dest: Path, fpr: str) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(key=key, dest=dest, fpr=fpr))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_LIBRARY": str(REPO_ROOT / "ansible/library"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"}
    return subprocess.run([str(BIN / "ansible-playbook"), str(play)], capture_output=True, text=True, env=env,
                          timeout=180, check=False)


@needs_gpg
@pytest.mark.skipif(os.geteuid() != 0, reason="the module writes the key owned by root")
def test_module_fails_with_both_fingerprints_and_writes_nothing(tmp_path: Path) -> None:
    armored, fpr = _gpg_key(tmp_path, "ed25519")
    key = tmp_path / "3bf863cc.pub"
    key.write_bytes(armored)
    dest = tmp_path / "keyrings" / "cuda-archive-keyring.asc"
    dest.parent.mkdir()

    wrong = _play(tmp_path, key, dest, NVIDIA_REPO_KEY_FINGERPRINT)
    assert wrong.returncode != 0
    assert f"has fingerprint {fpr}, the lock expects {NVIDIA_REPO_KEY_FINGERPRINT}" in wrong.stdout
    assert not dest.exists()

    ok = _play(tmp_path, key, dest, " ".join(fpr[i:i + 4] for i in range(0, 40, 4)).lower())
    assert ok.returncode == 0, ok.stdout
    assert "changed=1" in ok.stdout
    assert dest.read_bytes() == armored and (dest.stat().st_mode & 0o777) == 0o644
    again = _play(tmp_path, key, dest, fpr)
    assert "changed=0" in again.stdout and again.returncode == 0
    assert json.dumps(fpr) in again.stdout
