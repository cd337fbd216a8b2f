"""The apt_source_adopt module (issue 28 point 4) on a scratch apt tree: every other source of the managed repository
(one-line, deb822, any name and options, NVIDIA's cuda-keyring file at the role's own name, lines of the main
sources.list) is moved aside as a kept copy, nothing else is touched, check mode moves nothing, a rerun changes
nothing, an older copy is never overwritten, and the run's summary gets a line naming each file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.ansible_local import RUN_MODULE

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "ansible" / "library" / "apt_source_adopt.py"
# The one description of other installers' sources (the cuda-keyring layout, deb822 and trusted=yes copies).
FOREIGN = Path(__file__).resolve().parent / "fixtures" / "apt" / "foreign_sources.yml"
URI = "file:///srv/gpufleet-repo/ubuntu2204/x86_64"
MARKER = "# Managed by gpufleet (role nvidia_repo)"
OWN = f"{MARKER}\ndeb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {URI} /\n"
OWN_NAME = "cuda-ubuntu2204-x86_64.list"
ARCHIVE = "deb http://archive.ubuntu.com/ubuntu jammy main\n"
OTHER = "deb [signed-by=/usr/share/keyrings/docker.gpg] https://download.docker.com/linux/ubuntu jammy stable\n"


def run(root: Path, check: bool = False) -> dict[str, Any]:
    args = {"uri": URI, "keep": str(root / "d" / OWN_NAME), "keep_marker": MARKER, "sources_dir": str(root / "d"),
            "sources_list": str(root / "sources.list"), "_ansible_check_mode": check}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          check=False)
    result: dict[str, Any] = json.loads(proc.stdout)
    assert not result.get("failed"), result
    return result


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def foreign() -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = yaml.safe_load(FOREIGN.read_text())["foreign_sources"]
    return entries


def plant(root: Path, own: bool = False) -> dict[str, str]:
    """The foreign sources of tests/fixtures/apt/foreign_sources.yml under root, next to unrelated ones (and
    gpufleet's own source where no foreign file has its name). Returns {relative path: planted content}."""
    (root / "d").mkdir()
    (root / "sources.list").write_text(ARCHIVE)
    (root / "d" / "docker.list").write_text(OTHER)
    planted: dict[str, str] = {}
    for e in foreign():
        rel = "sources.list" if e["path"] == "/etc/apt/sources.list" else "d/" + Path(e["path"]).name
        content = e["content"].replace("@URI@", URI)
        with (root / rel).open("a") as f:
            f.write(content)
        planted[rel] = content
    if own:
        (root / "d" / OWN_NAME).write_text(OWN)
        del planted["d/" + OWN_NAME]
    return planted


def test_the_fixture_is_nvidia_s_layout_and_each_entry_names_the_repository() -> None:
    from gpufleet.module_utils.apt_sources import entries_for

    kinds = {e["kind"]: e for e in foreign()}
    # NVIDIA's cuda-keyring writes the role's own file name, with its keyring under /usr/share/keyrings.
    assert kinds["cuda_keyring"]["path"] == f"/etc/apt/sources.list.d/{OWN_NAME}"
    assert kinds["cuda_keyring"]["keyring"] == "/usr/share/keyrings/cuda-archive-keyring.gpg"
    assert kinds["cuda_keyring_deb822"]["path"].endswith(".sources")
    for e in foreign():
        (s,) = entries_for(e["content"].replace("@URI@", URI), URI)
        assert s.suite == "/"


def test_foreign_sources_moved_aside_and_kept_and_named_in_the_summary(tmp_path: Path) -> None:
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
    assert after["d/docker.list"] == OTHER
    # Each with the options of its entries, for `gpufleet drift` to rate (tests/test_drift_source_adopt.py).
    options = {str(Path(r["path"]).relative_to(tmp_path)): r["options"] for r in result["replaced"]}
    assert options["d/cuda-trusted.list"] == {"trusted": "yes"} and options["sources.list"] == {"trusted": "yes"}
    assert options["d/" + OWN_NAME] == {"signed-by": "/usr/share/keyrings/cuda-archive-keyring.gpg"}
    assert options["d/cuda-ubuntu2204-x86_64.sources"] == {"signed-by": "/usr/share/keyrings/cuda-archive-keyring.gpg"}
    notice = result["gpufleet_notice"]
    assert notice["event"] == "replaced apt sources"
    for rel in planted:
        assert f"{tmp_path / rel} (kept as {tmp_path / rel}.gpufleet-replaced)" in notice["detail"]


def test_gpufleet_s_own_source_is_left_alone(tmp_path: Path) -> None:
    planted = plant(tmp_path, own=True)
    result = run(tmp_path)
    assert len(result["replaced"]) == len(planted)
    assert (tmp_path / "d" / OWN_NAME).read_text() == OWN
    assert not (tmp_path / "d" / (OWN_NAME + ".gpufleet-replaced")).exists()


def test_check_mode_reports_and_moves_nothing(tmp_path: Path) -> None:
    planted = plant(tmp_path)
    before = tree(tmp_path)
    result = run(tmp_path, check=True)
    assert result["changed"] is True and result["gpufleet_notice"]["event"] == "would replace apt sources"
    assert len(result["replaced"]) == len(planted)
    assert tree(tmp_path) == before


def test_rerun_changes_nothing(tmp_path: Path) -> None:
    plant(tmp_path)
    run(tmp_path)
    (tmp_path / "d" / OWN_NAME).write_text(OWN)  # what the role writes next
    settled = tree(tmp_path)
    # drift after convergence is clean: the check run finds nothing to replace either
    assert run(tmp_path, check=True)["changed"] is False
    again = run(tmp_path)
    assert again["changed"] is False and again["replaced"] == [] and "gpufleet_notice" not in again
    assert tree(tmp_path) == settled


def test_earlier_copy_is_never_overwritten(tmp_path: Path) -> None:
    plant(tmp_path)
    run(tmp_path)
    (tmp_path / "d" / "cuda-trusted.list").write_text(f"deb [trusted=yes] {URI} /\n# again\n")
    result = run(tmp_path)
    assert [r["copy"] for r in result["replaced"]] == [str(tmp_path / "d" / "cuda-trusted.list.gpufleet-replaced.1")]
    assert (tmp_path / "d" / "cuda-trusted.list.gpufleet-replaced").read_text() == f"deb [trusted=yes] {URI} /\n"


def test_trailing_slash_comments_folded_uris_and_other_extensions(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.list").write_text(f"# deb {URI} /\ndeb {URI}/ /\n")
    (tmp_path / "d" / "b.list").write_text(f"# deb {URI} /\n")
    (tmp_path / "d" / "c.sources").write_text(f"Types: deb\nURIs: http://elsewhere\n {URI}/\nSuites: /\n")
    (tmp_path / "d" / "a.list.save").write_text(f"deb {URI} /\n")
    (tmp_path / "d" / "e.list").write_text(f"deb {URI}-other /\n")
    result = run(tmp_path)
    assert sorted(Path(r["path"]).name for r in result["replaced"]) == ["a.list", "c.sources"]
    assert (tmp_path / "d" / "b.list").exists() and (tmp_path / "d" / "a.list.save").exists()
    assert (tmp_path / "d" / "e.list").exists()


def test_one_grammar_the_module_reads_sources_with_gpufleet_s() -> None:
    # The module and `gpufleet drift` read sources with one parser (gpufleet/module_utils/apt_sources.py).
    from gpufleet.drift import security
    from gpufleet.module_utils import apt_sources

    assert security.parse_sources is apt_sources.parse_sources
    text = MODULE.read_text()
    assert "from ansible.module_utils.gpufleet_apt_sources import" in text and "re.compile" not in text


def test_documentation_parses_and_documents_every_option() -> None:
    text = MODULE.read_text()
    ns: dict[str, Any] = {}
    for name in ("DOCUMENTATION", "RETURN", "EXAMPLES"):
        start = text.index(f'{name} = r"""') + len(f'{name} = r"""')
        ns[name] = yaml.safe_load(text[start:text.index('"""', start)])
    assert set(ns["DOCUMENTATION"]["options"]) == {"uri", "keep", "keep_marker", "sources_dir", "sources_list"}
    assert {"replaced", "gpufleet_notice"} <= set(ns["RETURN"])


def test_the_run_s_summary_names_each_replaced_file_and_its_copy(tmp_path: Path) -> None:
    # The module's result as ansible-runner reports it: the summary's line comes from its gpufleet_notice.
    import io

    from rich.console import Console

    from gpufleet.ansible_run import build_result
    from gpufleet.ansible_run.display import summary

    planted = plant(tmp_path)
    res = run(tmp_path)
    events = [
        {"event": "runner_on_ok", "event_data": {
            "play": "p", "host": "gpu-0", "role": "nvidia_repo", "task_uuid": "u1", "task_action": "apt_source_adopt",
            "task": "Replace the other sources of the repository (kept as .gpufleet-replaced copies)", "res": res}},
        {"event": "playbook_on_stats", "event_data": {"ok": {"gpu-0": 1}, "changed": {"gpu-0": 1},
                                                      "processed": {"gpu-0": 1}}},
    ]
    result = build_result(events, rc=0, status="successful")
    (notice,) = result.notices
    assert notice.line.startswith("replaced apt sources on gpu-0: ")
    console = Console(file=io.StringIO(), width=1000, color_system=None, force_terminal=False)
    console.print(summary(result))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    for rel in planted:
        assert f"{tmp_path / rel} (kept as {tmp_path / rel}.gpufleet-replaced)" in text


def test_the_cuda_keyring_layout_is_the_one_the_audits_foreign_kind_makes() -> None:
    """Two fixtures plant NVIDIA's cuda-keyring layout: this file's entry (nvidia_repo's adoption scenario) and
    molecule/shared/foreign_kinds.yml's kind (a) (the audit scenario). Until one reads the other they must not drift
    apart: the same source file, the same keyring, the same source line but for the repository's URI."""
    kind = yaml.safe_load((Path(__file__).resolve().parents[1] / "molecule" / "shared" / "foreign_kinds.yml")
                          .read_text())["cuda_keyring"]
    ours = {e["kind"]: e for e in foreign()}["cuda_keyring"]
    (source,) = kind["sources"]
    (keyring,) = kind["keyrings"]
    assert source["path"] == ours["path"] and keyring["dest"] == ours["keyring"]
    uri = source["content"].split("] ", 1)[1].split(" ", 1)[0].rstrip("/")
    assert source["content"] == ours["content"].replace("@URI@", uri)
