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


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_preflight_runs_first(role: Path) -> None:
    tasks = _load(role / "tasks" / "main.yml")
    assert isinstance(tasks, list)
    assert (role / "tasks" / "preflight.yml").exists()
    first_real = next(t for t in tasks if "ansible.builtin.include_vars" not in t)
    assert first_real.get("ansible.builtin.import_tasks") == "preflight.yml", f"{role.name}: preflight is not first"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_role_has_molecule_scenario_with_check(role: Path) -> None:
    scenario = REPO_ROOT / "molecule" / role.name / "molecule.yml"
    assert scenario.exists(), f"no Molecule scenario for {role.name}"
    seq = _load(scenario)["scenario"]["test_sequence"]  # type: ignore[index]
    for step in ("check", "converge", "idempotence", "verify"):
        assert step in seq, f"{role.name}: scenario lacks {step}"
    assert seq.index("check") < seq.index("converge")
