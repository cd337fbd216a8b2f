"""The test doubles (``testbed``) stay out of the product: only the local sandbox backend imports them.

Every ``import``/``from ... import`` of every module under ``gpufleet/`` is read from its AST (so an import
inside a function or a ``TYPE_CHECKING`` block counts too), and ``importlib.import_module("testbed...")`` /
``__import__("testbed...")`` calls with a literal name count as imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PRODUCT = REPO_ROOT / "gpufleet"
#: The one backend that builds the fixture repository and starts simulated nodes.
ALLOWED = PRODUCT / "sandbox"


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _testbed_imports(root: Path, allowed: Path, base: Path = REPO_ROOT) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(allowed):
            continue
        for line, module in _imported_modules(ast.parse(path.read_bytes(), filename=str(path))):
            if module == "testbed" or module.startswith("testbed."):
                hits.append(f"{path.relative_to(base)}:{line}: imports {module}")
    return hits


def test_only_the_sandbox_backend_imports_testbed() -> None:
    assert _testbed_imports(PRODUCT, ALLOWED) == []


def test_the_sandbox_backend_is_the_one_that_does() -> None:
    # Guards the check itself: the AST walk sees the sandbox's import (else the test above proves nothing).
    assert _testbed_imports(ALLOWED, ALLOWED / "nothing-allowed") != []


def test_the_walk_catches_every_import_form(tmp_path: Path) -> None:
    pkg = tmp_path / "gpufleet"
    (pkg / "sandbox").mkdir(parents=True)
    (pkg / "sandbox" / "ok.py").write_text("from testbed.fixture_repo import build_repo\n")
    (pkg / "a.py").write_text("import testbed.simulator\n")
    (pkg / "b.py").write_text("def f():\n    from testbed import fixture_repo\n")
    (pkg / "c.py").write_text("import importlib\nimportlib.import_module('testbed.simulator')\n")
    (pkg / "d.py").write_text("import testbedding\nfrom gpufleet.sandbox import platform\n")
    assert _testbed_imports(pkg, pkg / "sandbox", tmp_path) == [
        "gpufleet/a.py:1: imports testbed.simulator",
        "gpufleet/b.py:2: imports testbed",
        "gpufleet/c.py:2: imports testbed.simulator",
    ]
