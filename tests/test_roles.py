"""Structural rules every role follows (argument specs in sync with defaults, preflight, scenarios)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet import REPO_ROOT

ROLES = sorted(p for p in (REPO_ROOT / "roles").iterdir() if (p / "tasks" / "main.yml").exists())
#: The generated defaults layer (role gpufleet_defaults): versions the package roles document but do not default.
LAYER = REPO_ROOT / "roles" / "gpufleet_defaults" / "defaults" / "main.yml"


def _load(path: Path) -> object:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml") or {}
    specs = _load(role / "meta" / "argument_specs.yml")
    assert isinstance(defaults, dict) and isinstance(specs, dict)
    options = specs["argument_specs"]["main"]["options"]
    layer = _load(LAYER)
    assert isinstance(layer, dict)
    defaults = {**{k: layer[k] for k in options if k in layer}, **defaults}
    assert sorted(options) == sorted(defaults), (
        f"{role.name}: meta/argument_specs.yml and defaults/main.yml differ: "
        f"only in specs {sorted(set(options) - set(defaults))}, only in defaults {sorted(set(defaults) - set(options))}"
    )
    for name, opt in options.items():
        assert opt.get("description"), f"{role.name}: {name} has no description"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_variables_are_role_prefixed(role: Path) -> None:
    defaults = _load(role / "defaults" / "main.yml") or {}
    assert isinstance(defaults, dict)
    bad = [k for k in defaults if not k.startswith(f"{role.name}_")]
    assert not bad, f"{role.name}: defaults without the role prefix: {bad}"


def _real(task: dict[str, object]) -> bool:
    """Not the variables, nor roles/host_footprint's probe and the end it decides (tests/test_host_footprint.py)."""
    probe = task.get("ansible.builtin.import_role") == {"name": "host_footprint", "tasks_from": "probe"}
    return "ansible.builtin.include_vars" not in task and not probe and task.get("ansible.builtin.meta") != "end_role"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_preflight_runs_first(role: Path) -> None:
    """First after the footprint probe: a converged host skips the preflight with the rest (same inputs as passed)."""
    tasks = _load(role / "tasks" / "main.yml")
    assert isinstance(tasks, list)
    assert (role / "tasks" / "preflight.yml").exists()
    first_real = next(t for t in tasks if _real(t))
    gate = first_real.get("ansible.builtin.include_tasks")
    if isinstance(gate, str) and first_real.get("when"):
        # A role that applies only to some hosts (rdma: InfiniBand/RoCE pools) is one gated include: its included
        # file starts with the preflight instead
        inner = _load(role / "tasks" / gate)
        assert isinstance(inner, list) and len(tasks) == 1, f"{role.name}: the gate must be main.yml's only task"
        first_real = next(t for t in inner if _real(t))
    assert first_real.get("ansible.builtin.import_tasks") == "preflight.yml", f"{role.name}: preflight is not first"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_molecule_scenario_with_check(role: Path) -> None:
    scenario = REPO_ROOT / "molecule" / role.name / "molecule.yml"
    assert scenario.exists(), f"no Molecule scenario for {role.name}"
    seq = _load(scenario)["scenario"]["test_sequence"]  # type: ignore[index]
    for step in ("check", "converge", "idempotence", "verify"):
        assert step in seq, f"{role.name}: scenario lacks {step}"
    assert seq.index("check") < seq.index("converge")


#: The break-and-restore step (molecule/shared/restore.yml) as a scenario's test_sequence names it.
RESTORE_STEP = "side_effect ../shared/restore.yml"
SCENARIOS = sorted(p.parent for p in (REPO_ROOT / "molecule").glob("*/molecule.yml"))


def _runs_restore(scenario: Path) -> tuple[list[str], bool]:
    """The scenario's test_sequence and whether it runs restore.yml (as an argument, or as its side_effect)."""
    doc = _load(scenario / "molecule.yml")
    assert isinstance(doc, dict)
    seq: list[str] = doc["scenario"]["test_sequence"]
    default = ((doc.get("provisioner") or {}).get("playbooks") or {}).get("side_effect", "")
    return seq, RESTORE_STEP in seq or (default == "../shared/restore.yml" and "side_effect" in seq)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_break_and_restore_step_is_wired(scenario: Path) -> None:
    """A scenario with breaks.yml runs restore.yml between idempotence and verify, and one that runs it has
    well-formed breaks: each a name, a script and the converge tasks that must report changed."""
    seq, runs = _runs_restore(scenario)
    breaks_file = scenario / "breaks.yml"
    assert runs == breaks_file.exists(), (
        f"{scenario.name}: {'runs restore.yml without' if runs else 'has'} breaks.yml"
        f"{'' if runs else ' but its test_sequence lacks ' + repr(RESTORE_STEP)}"
    )
    if not runs:
        return
    step = seq.index(RESTORE_STEP) if RESTORE_STEP in seq else seq.index("side_effect")
    assert seq.index("idempotence") < step < seq.index("verify"), (
        f"{scenario.name}: restore must run after idempotence, before verify"
    )
    doc = _load(breaks_file)
    assert isinstance(doc, dict) and isinstance(doc.get("restore_breaks"), list) and doc["restore_breaks"], (
        f"{breaks_file}: restore_breaks must be a non-empty list"
    )
    for b in doc["restore_breaks"]:
        assert isinstance(b, dict) and set(b) <= {"name", "run", "changed", "hosts", "footprint"}, (
            f"{breaks_file}: bad entry {b}")
        if "footprint" in b:
            # Only a scenario whose converge runs no role with roles/host_footprint's probe may exempt a break.
            assert b["footprint"] is False and not _probing_roles(scenario / "converge.yml"), (
                f"{breaks_file}: {b['name']}: footprint: false only where no converged role probes the footprint")
        assert isinstance(b.get("name"), str) and isinstance(b.get("run"), str), f"{breaks_file}: {b}: name, run"
        changed = b.get("changed")
        assert isinstance(changed, list) and changed and all(isinstance(t, str) for t in changed), (
            f"{breaks_file}: {b['name']}: changed must be a non-empty list of task names"
        )


def _probing_roles(converge: Path) -> list[str]:
    """The roles a converge playbook runs whose tasks start with roles/host_footprint's probe."""
    plays = _load(converge)
    assert isinstance(plays, list)
    names = [r if isinstance(r, str) else r.get("role") for p in plays for r in p.get("roles") or []]
    probing = []
    for name in names:
        main = REPO_ROOT / "roles" / str(name) / "tasks" / "main.yml"
        text = main.read_text() if main.exists() else ""
        if "tasks_from: probe" in text or (main.parent / "fabric.yml").exists():
            probing.append(str(name))
    return probing


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.name)
def test_side_effect_steps_have_a_playbook_of_their_own(scenario: Path) -> None:
    """Molecule runs a `side_effect` step, with a playbook argument or without, only when the scenario has a
    side_effect playbook of its own (provisioner.playbooks.side_effect, or side_effect.yml beside molecule.yml);
    without one it reports "Missing playbook" and goes on: the break-and-restore step would silently not run."""
    doc = _load(scenario / "molecule.yml")
    assert isinstance(doc, dict)
    seq: list[str] = doc["scenario"]["test_sequence"]
    own = ((doc.get("provisioner") or {}).get("playbooks") or {}).get("side_effect")
    steps = [s for s in seq if s.split(" ", 1)[0] == "side_effect"]
    assert not steps or own or (scenario / "side_effect.yml").exists(), (
        f"{scenario.name}: test_sequence has {steps} but no side_effect playbook of its own, so Molecule skips "
        f"them; set provisioner.playbooks.side_effect (e.g. ../shared/restore.yml) in its molecule.yml"
    )
