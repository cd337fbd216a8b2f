"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML (ansible-doc and the argument-spec tools read them;
a `word: more words` line in a plain list item made two of them unreadable, and no other check parses them)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from gpufleet import REPO_ROOT

MODULES = sorted([*(REPO_ROOT / "ansible" / "library").glob("*.py"), *(REPO_ROOT / "roles").glob("*/library/*.py")])
BLOCKS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def _blocks(path: Path) -> dict[str, str]:
    out = {}
    for node in ast.parse(path.read_text()).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id in BLOCKS
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            out[node.targets[0].id] = node.value.value
    return out


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_documentation_is_yaml(path: Path) -> None:
    blocks = _blocks(path)
    assert "DOCUMENTATION" in blocks, f"{path.name}: no DOCUMENTATION"
    for name, text in blocks.items():
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as e:
            pytest.fail(f"{path.name} {name}: {e}")
        if name == "DOCUMENTATION":
            assert data["module"] == path.stem and data["short_description"]
