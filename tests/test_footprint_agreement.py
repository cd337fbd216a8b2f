"""The footprint agreement test's generator and node half (issue 26 point 2), without Molecule.

molecule/shared/agree.yml perturbs converged nodes with what testbed/footprint_perturb.py generates from the roles'
files and asks the probe; where the probe still says converged, the converge with the probe off must change
nothing. These tests prove the parts that do not need a node: every role with a probe gets perturbations and runs
the test in CI, the generator does not draw from the footprint's own lists, each perturbation is undone exactly
(the probe holds again), and a footprint weakened by one path misses a generated perturbation that the whole one
sees: the case the agreement test sends to the full check.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from testbed import footprint_perturb, footprint_perturb_host
from tests.test_host_footprint import DEFAULTS, run

ROLES = REPO_ROOT / "roles"
MOLECULE = REPO_ROOT / "molecule"


def test_every_role_with_a_probe_gets_perturbations_of_each_kind_it_names() -> None:
    probing = footprint_perturb.probing_roles(ROLES)
    assert {"cudnn", "nccl", "slurm", "nvidia_driver", "cuda_toolkit"} <= set(probing)
    for role in probing:
        kinds = {c["kind"] for c in footprint_perturb.candidates(ROLES, role)}
        assert "path" in kinds, f"{role}: no path generated"
    # The package files come from the components a role pins (pinned_packages), programs from what it runs.
    assert {"path", "package"} <= {c["kind"] for c in footprint_perturb.candidates(ROLES, "cudnn")}
    assert "program" in {c["kind"] for c in footprint_perturb.candidates(ROLES, "nvidia_container_toolkit")}
    assert "{{ slurm_compute_group }}" in footprint_perturb.groups_read(ROLES, "slurm")


def test_the_agreement_test_runs_in_ci_for_every_role_with_a_probe() -> None:
    """restore.yml imports agree.yml; every role with a probe is converged by a scenario that runs restore.yml."""
    restore = yaml.safe_load((MOLECULE / "shared" / "restore.yml").read_text())
    assert any(p.get("ansible.builtin.import_playbook") == "agree.yml" for p in restore)
    covered: set[str] = set()
    for scenario in sorted(MOLECULE.iterdir()):
        mol = scenario / "molecule.yml"
        if not mol.exists() or not (scenario / "converge.yml").exists():
            continue
        data = yaml.safe_load(mol.read_text()) or {}
        steps = (data.get("scenario") or {}).get("test_sequence") or []
        default = ((data.get("provisioner") or {}).get("playbooks") or {}).get("side_effect")
        # A step `side_effect ../shared/restore.yml`, or a plain `side_effect` whose playbook is restore.yml.
        plain = default == "../shared/restore.yml" and "side_effect" in steps
        if "side_effect ../shared/restore.yml" in steps or plain:
            covered |= set(footprint_perturb.converge_roles(scenario / "converge.yml", ROLES))
    missing = set(footprint_perturb.probing_roles(ROLES)) - covered
    assert not missing, f"roles with a probe in no scenario that runs molecule/shared/restore.yml: {sorted(missing)}"


def test_the_generator_does_not_draw_from_the_footprints_own_lists(tmp_path: Path) -> None:
    """A path only the role's meta/footprint.yml names is not generated: the test would only find what it reads."""
    roles = tmp_path / "roles"
    shutil.copytree(ROLES / "host_footprint", roles / "host_footprint")
    (roles / "r" / "tasks").mkdir(parents=True)
    (roles / "r" / "meta").mkdir()
    (roles / "r" / "tasks" / "main.yml").write_text(
        "- ansible.builtin.import_role: {name: host_footprint, tasks_from: probe}\n"
        "- ansible.builtin.template: {src: a.j2, dest: /etc/r/a.conf, mode: '0644'}\n"
        "- ansible.builtin.command:\n    argv: [/usr/bin/r-tool, '{{ r_x }}']\n")
    (roles / "r" / "meta" / "footprint.yml").write_text("relies_on: [/usr/bin/only-listed]\n")
    got = {(c["kind"], c["pattern"]) for c in footprint_perturb.candidates(roles, "r")}
    assert ("path", "/etc/r/a.conf") in got and ("program", "/usr/bin/r-tool") in got
    assert not any("only-listed" in p for _k, p in got)
    assert footprint_perturb.probing_roles(roles) == ["r"]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch node: a managed file, a link chain to a toolkit directory, a program; the helper's state in it."""
    monkeypatch.setattr(footprint_perturb_host, "STATE", str(tmp_path / "agree-state.json"))
    # The configuration trees as the helper classifies them, under the scratch root.
    config = tuple(str(tmp_path) + c for c in footprint_perturb_host.CONFIG)
    monkeypatch.setattr(footprint_perturb_host, "CONFIG", config)
    (tmp_path / "etc/apt/preferences.d").mkdir(parents=True)
    (tmp_path / "etc/apt/preferences.d/gpufleet-nccl.pref").write_text("Pin-Priority: 1001\n")
    (tmp_path / "etc/nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    (tmp_path / "etc/alternatives").mkdir()
    (tmp_path / "usr/local/cuda-12.8/bin").mkdir(parents=True)
    # Relative links: the helper follows them with the test machine's realpath, the module inside its root.
    (tmp_path / "usr/local/cuda").symlink_to("../../etc/alternatives/cuda")
    (tmp_path / "etc/alternatives/cuda").symlink_to("../../usr/local/cuda-12.8")
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-ctk").write_bytes(b"\x7fELF")
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text("Package: libnccl2\nStatus: install ok installed\n")
    (tmp_path / "proc").mkdir()
    return tmp_path


def _expand(node: Path, candidates: list[tuple[str, str]]) -> list[dict[str, Any]]:
    out = footprint_perturb_host.expand({"candidates": [
        {"role": "r", "kind": kind, "pattern": str(node) + pattern} for kind, pattern in candidates]})
    return list(out["perturbations"])


READS: dict[str, Any] = {"paths": ["/etc/apt", "/etc/nccl.conf", "/usr/local/cuda"],
                         "files": ["/usr/bin/nvidia-ctk"]}


def test_each_perturbation_is_seen_by_the_whole_footprint_and_undone_exactly(node: Path) -> None:
    plan = _expand(node, [("path", "/etc/nccl.conf"), ("path", "/usr/local/cuda"), ("path", "/etc/apt"),
                          ("program", "/usr/bin/nvidia-ctk")])
    ops = {(p["op"], p["path"].removeprefix(str(node))) for p in plan}
    assert ops == {("append", "/etc/nccl.conf"), ("replace", "/usr/local/cuda-12.8"), ("mode", "/etc/apt"),
                   ("remove", "/usr/bin/nvidia-ctk")}
    run(node, "record", ["r"], **READS)
    assert run(node, scopes=["r"], **READS)["converged"] is True
    for p in plan:
        assert footprint_perturb_host.apply({"perturbations": [p]})["applied"] == [p["id"]]
        seen = run(node, scopes=["r"], **READS)
        assert seen["converged"] is False, (p, seen["reason"])
        assert footprint_perturb_host.restore() == {"restored": 1, "failed": []}
        back = run(node, scopes=["r"], **READS)
        assert back["converged"] is True, (p, back["reason"])  # content, inode and times as before


def test_a_footprint_weakened_by_one_path_misses_a_generated_perturbation(node: Path) -> None:
    """nccl writes /etc/nccl.conf (the generator finds it in the role's files); a footprint without that path says
    converged after the generated perturbation, which agree.yml then hands to the converge with the probe off."""
    nccl = {c["pattern"] for c in footprint_perturb.candidates(ROLES, "nccl") if c["kind"] == "path"}
    assert "/etc/nccl.conf" in nccl and "/etc/nccl.conf" in DEFAULTS["host_footprint_paths"]
    weak = {**READS, "paths": [p for p in READS["paths"] if p != "/etc/nccl.conf"]}
    (perturbation,) = _expand(node, [("path", "/etc/nccl.conf")])
    for reads, converged in ((READS, False), (weak, True)):
        run(node, "record", ["nccl"], **reads)
        footprint_perturb_host.apply({"perturbations": [perturbation]})
        assert run(node, scopes=["nccl"], **reads)["converged"] is converged
        footprint_perturb_host.restore()


def test_the_simulators_topology_loses_nvlinks_and_comes_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(footprint_perturb_host, "STATE", str(tmp_path / "state.json"))
    monkeypatch.setattr(footprint_perturb_host, "TOPO_GLOB", str(tmp_path / "*.txt"))
    board = tmp_path / "h200.txt"
    board.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV18\nGPU1\tNV18\t X \n")
    plan = footprint_perturb_host.expand({"candidates": []})["perturbations"]
    assert [p["op"] for p in plan] == ["topology"]
    before = board.read_bytes(), board.stat().st_mtime_ns
    footprint_perturb_host.apply({"perturbations": plan})
    assert re.findall(r"NV\d+", board.read_text()) == ["NV9", "NV9"]
    footprint_perturb_host.restore()
    assert (board.read_bytes(), board.stat().st_mtime_ns) == before


def test_the_node_half_runs_as_a_script_and_prints_json(tmp_path: Path) -> None:
    """The action plugin sends the file as ``python3 -c``: standard library only, one JSON object printed."""
    import subprocess
    import sys
    src = (REPO_ROOT / "testbed" / "footprint_perturb_host.py").read_text()
    out = subprocess.run([sys.executable, "-c", src, "expand", json.dumps({"candidates": [
        {"role": "r", "kind": "path", "pattern": str(tmp_path / "absent")}]})], capture_output=True, text=True,
        check=True)
    assert set(json.loads(out.stdout)) == {"perturbations", "skipped", "left_out"}


def test_probe_each_runs_the_probe_after_each_perturbation_and_undoes_it(node: Path) -> None:
    """The node's one-process sequence: apply, run the probe program, undo; then the other probes once."""
    probe = node / "probe.py"
    # A stand-in for the built module: converged while /etc/nccl.conf is as recorded (it prints one JSON line).
    probe.write_text("import json, pathlib\n"
                     f"ok = pathlib.Path({str(node / 'etc/nccl.conf')!r}).read_text() == 'NCCL_DEBUG=WARN\\n'\n"
                     "print(json.dumps({'converged': ok, 'reason': 'same' if ok else 'nccl.conf'}))\n")
    out = footprint_perturb_host.probe_each({
        "candidates": [{"role": "r", "kind": "path", "pattern": str(node / "etc/nccl.conf")},
                       {"role": "r", "kind": "program", "pattern": str(node / "usr/bin/nvidia-ctk")}],
        "probes": {"state": str(probe), "group:r": str(probe)}, "check_undo": True})
    verdicts = {(p["op"], p["path"].removeprefix(str(node))): p["converged"] for p in out["perturbations"]}
    assert verdicts == {("append", "/etc/nccl.conf"): False, ("remove", "/usr/bin/nvidia-ctk"): True}
    assert out["converged_after"] is True and out["others"] == {"group:r": {"converged": True, "reason": "same"}}
    assert (node / "etc/nccl.conf").read_text() == "NCCL_DEBUG=WARN\n" and (node / "usr/bin/nvidia-ctk").exists()

