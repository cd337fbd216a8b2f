"""The node-side health programs roles ship (roles/slurm's HealthCheckProgram, roles/node_validation's timer): what
they import on a bare python3 must be exactly the role's module list, each linked to the package file (one copy of
the checks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from gpufleet import REPO_ROOT


def assert_role_ships_what_it_imports(role: Path, list_var: str, *imports: str) -> None:
    """Import ``imports`` where pydantic and yaml are missing (a node's bare python3); every gpufleet module loaded
    must be in ``list_var`` of the role's vars/main.yml and linked under files/health to the package's own file."""
    code = ("import sys\nfor m in ('pydantic', 'pydantic_core', 'yaml'): sys.modules[m] = None\n"
            f"import {', '.join(imports)}\n"
            "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('gpufleet'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                         cwd=REPO_ROOT).stdout.split()
    loaded = sorted(str(Path(f).relative_to(REPO_ROOT)) for f in out)
    listed = yaml.safe_load((role / "vars/main.yml").read_text())[list_var]
    assert sorted(listed) == loaded
    for m in listed:
        link = role / "files/health" / m
        assert link.is_symlink() and link.resolve() == (REPO_ROOT / m).resolve(), m
