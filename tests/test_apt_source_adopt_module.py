"""The apt_source_adopt module (issue 28 point 4) on a scratch apt tree: every other source of the managed repository
(one-line, deb822, any name and options, lines of the main sources.list) is moved aside as a kept copy, nothing else
is touched, check mode moves nothing, a rerun changes nothing and an older copy is never overwritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "apt_source_adopt.py"
# The one description of other installers' sources (the cuda-keyring layout, trusted=yes copies).
FOREIGN = Path(__file__).resolve().parent / "fixtures" / "apt" / "foreign_sources.yml"
URI = "file:///srv/gpufleet-repo/ubuntu2204/x86_64"
OWN = f"deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {URI} /\n"
ARCHIVE = "deb http://archive.ubuntu.com/ubuntu jammy main\n"
OTHER = "deb [signed-by=/usr/share/keyrings/docker.gpg] https://download.docker.com/linux/ubuntu jammy stable\n"


def run(root: Path, check: bool = False) -> dict[str, object]:
    args = {"uri": URI, "keep": str(root / "d" / "cuda-ubuntu2204-x86_64.list"), "sources_dir": str(root / "d"),
            "sources_list": str(root / "sources.list"), "_ansible_check_mode": check}
    proc = subprocess.run([sys.executable, str(MODULE)], input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
                          capture_output=True, text=True, check=False)
    result: dict[str, object] = json.loads(proc.stdout)
    assert not result.get("failed"), result
    return result


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def plant(root: Path) -> dict[str, str]:
    """The foreign sources of tests/fixtures/apt/foreign_sources.yml under root, with gpufleet's and unrelated ones."""
    (root / "d").mkdir()
    (root / "sources.list").write_text(ARCHIVE)
    (root / "d" / "cuda-ubuntu2204-x86_64.list").write_text(OWN)
    (root / "d" / "docker.list").write_text(OTHER)
    planted: dict[str, str] = {}
    for e in yaml.safe_load(FOREIGN.read_text())["foreign_sources"]:
        rel = "sources.list" if e["path"] == "/etc/apt/sources.list" else "d/" + Path(e["path"]).name
        content = e["content"].replace("@URI@", URI)
        with (root / rel).open("a") as f:
            f.write(content)
        planted[rel] = content
    return planted


def test_foreign_sources_moved_aside_and_kept(tmp_path: Path) -> None:
    planted = plant(tmp_path)
    before = tree(tmp_path)
    result = run(tmp_path)
    assert result["changed"] is True
    assert sorted(str(Path(r["path"]).relative_to(tmp_path)) for r in result["replaced"]) == sorted(planted)
    after = tree(tmp_path)
    for rel in planted:
        assert after[rel + ".gpufleet-replaced"] == before[rel]
        if rel != "sources.list":
            assert rel not in after
    # The main file keeps the distribution's lines; only the repository's line is commented out.
    assert after["sources.list"] == ARCHIVE + "# " + planted["sources.list"]
    # gpufleet's own source and unrelated sources are left alone.
    assert after["d/cuda-ubuntu2204-x86_64.list"] == OWN
    assert after["d/docker.list"] == OTHER


def test_check_mode_reports_and_moves_nothing(tmp_path: Path) -> None:
    planted = plant(tmp_path)
    before = tree(tmp_path)
    result = run(tmp_path, check=True)
    assert result["changed"] is True
    assert len(result["replaced"]) == len(planted)
    assert tree(tmp_path) == before


def test_rerun_changes_nothing(tmp_path: Path) -> None:
    plant(tmp_path)
    run(tmp_path)
    settled = tree(tmp_path)
    again = run(tmp_path)
    assert again["changed"] is False and again["replaced"] == []
    assert tree(tmp_path) == settled


def test_earlier_copy_is_never_overwritten(tmp_path: Path) -> None:
    plant(tmp_path)
    run(tmp_path)
    (tmp_path / "d" / "cuda-keyring.list").write_text(f"deb [trusted=yes] {URI} /\n")
    result = run(tmp_path)
    assert [r["copy"] for r in result["replaced"]] == [str(tmp_path / "d" / "cuda-keyring.list.gpufleet-replaced.1")]
    assert "signed-by=/usr/share/keyrings" in (tmp_path / "d" / "cuda-keyring.list.gpufleet-replaced").read_text()


def test_trailing_slash_and_comments(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.list").write_text(f"# deb {URI} /\ndeb {URI}/ /\n")
    (tmp_path / "d" / "b.list").write_text(f"# deb {URI} /\n")
    (tmp_path / "d" / "c.sources").write_text(f"Types: deb\nURIs: http://elsewhere\n {URI}/\nSuites: /\n")
    (tmp_path / "d" / "a.list.save").write_text(f"deb {URI} /\n")
    result = run(tmp_path)
    assert sorted(Path(r["path"]).name for r in result["replaced"]) == ["a.list", "c.sources"]
    assert (tmp_path / "d" / "b.list").exists() and (tmp_path / "d" / "a.list.save").exists()
