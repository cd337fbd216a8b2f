"""docs/stack-config.md is generated from the stack model and current; every fix the errors give points at it."""

from __future__ import annotations

from gpufleet import REPO_ROOT
from gpufleet.spec import ClusterSpec
from gpufleet.stackdoc import render

DOC = REPO_ROOT / "docs" / "stack-config.md"


def test_stack_config_doc_is_current() -> None:
    assert DOC.read_text() == render(), "run: python -m gpufleet.stackdoc > docs/stack-config.md"


def test_every_key_is_documented_with_type_default_and_example() -> None:
    text = DOC.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `gpufleet:")]
    keys = {ln.split("`")[1] for ln in rows}
    for top in ("gpufleet:backend", "gpufleet:clusterName", "gpufleet:lock", "gpufleet:pools",
                "gpufleet:storage.lustre.fsname", "gpufleet:pools[].hosts[].address", "gpufleet:workloadNamespaces"):
        assert top in keys
    assert len(rows) >= len(ClusterSpec.model_fields) + 30
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5, row
        assert all(cells[1:4]), row  # type, default, example


def test_docs_referenced_by_fixes_exist() -> None:
    """A fix never points at a file that does not exist: every docs/*.md the package names is there."""
    import re

    sources = (REPO_ROOT / "gpufleet").rglob("*.py")
    named = {m for py in sources for m in re.findall(r"docs/[a-z_-]+\.md", py.read_text())}
    assert "docs/stack-config.md" in named
    missing = sorted(p for p in named if not (REPO_ROOT / p).is_file())
    assert missing == []
