"""The audit scenario's adoption step (molecule/audit/adopt.yml, issue 28 acceptance): wired after the audit's
checks, converging the foreign nodes with the gpufleet node's roles, and each foreign kind's `adopt` entry
(molecule/shared/foreign_kinds.yml) agreeing with what roles/nvidia_driver actually says when it refuses a kind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from tests.test_adopt_driver import DPKG_DEBIAN, _run

AUDIT = REPO_ROOT / "molecule" / "audit"
KINDS: dict[str, Any] = yaml.safe_load((REPO_ROOT / "molecule" / "shared" / "foreign_kinds.yml").read_text())


def _roles(playbook: Path) -> list[str]:
    return [r["role"] for play in yaml.safe_load(playbook.read_text()) for r in play.get("roles", [])]


def test_the_adoption_runs_after_the_audit_s_checks_and_before_the_verifier() -> None:
    # side_effect.yml audits and keeps its proofs (no file, no digest changed) before adopt.yml changes any node.
    seq = yaml.safe_load((AUDIT / "molecule.yml").read_text())["scenario"]["test_sequence"]
    assert seq.index("side_effect") < seq.index("side_effect adopt.yml") < seq.index("verify")
    assert "adopt.yml" not in (AUDIT / "side_effect.yml").read_text()


def test_the_foreign_nodes_converge_with_the_gpufleet_node_s_roles_and_the_proposed_lock() -> None:
    assert _roles(AUDIT / "adopt_converge.yml") == _roles(AUDIT / "converge.yml") == ["nvidia_driver"]
    (play,) = yaml.safe_load((AUDIT / "adopt_converge.yml").read_text())
    assert play["hosts"] == "foreign"
    # the variables `gpufleet lock render` writes from the stack side_effect.yml proposed
    (vars_file,) = play["vars_files"]
    assert vars_file.endswith("/adopt-lock/group_vars/all/versions.yml")
    adopt = (AUDIT / "adopt.yml").read_text()
    assert "lock, render, --stack, \"{{ __out }}/Pulumi.audit-adopt.yaml\"" in adopt
    assert "--write-stack {{ __out }}/Pulumi.audit-adopt.yaml" in (AUDIT / "side_effect.yml").read_text()


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_says_whether_converge_adopts_it(name: str) -> None:
    adopt = KINDS[name]["adopt"]
    assert set(adopt) == {"refused", "fix"}
    assert (adopt["refused"] is None) == (adopt["fix"] is None), "a refused kind names its fix"


def test_the_refused_kind_s_phrase_and_fix_are_what_the_role_says(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The Debian kind's refusal as roles/nvidia_driver prints it for Debian's packages: adopt.yml extracts the fix
    # from this message with the kind's pattern and runs it on the node.
    refused = [k["adopt"] for k in KINDS.values() if k["adopt"]["refused"]]
    assert len(refused) == 1 and KINDS["debian_nonfree"]["adopt"] == refused[0]
    rc, out = _run(tmp_path, monkeypatch, DPKG_DEBIAN)
    log = " ".join(out.split())
    assert rc == 2 and refused[0]["refused"] in log
    fix = re.search(refused[0]["fix"], log)
    assert fix is not None and fix.group(0).split()[:2] == ["apt-get", "purge"], log
    assert fix.group(0).split()[2:] == [ln.split()[2] for ln in DPKG_DEBIAN.splitlines()
                                        if ln.startswith("installed nvidia-graphics-drivers ")]
