"""The AWX/AAP path: a playbook run by ``ansible-runner run`` in a private data dir laid out as AWX lays it out, and
gpufleet's reports built from that job's events (``gpufleet drift --events``, ``gpufleet report --events``).

The drift half is the acceptance's "same report": the fixture playbook is converged, drift is made on its hosts,
then one check run goes through ansible-runner (AWX's way) and one through gpufleet's own pipe (``gpufleet drift``'s
way), and the two reports must be equal item for item. The Molecule ``ssh`` scenario does the same with site.yml's
roles over SSH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpufleet.ansible_run.job_events import read_job_events
from gpufleet.cli import app
from gpufleet.drift.report import DriftReport, RawResults, build_report
from gpufleet.drift.runner import report_from_events
from gpufleet.errors import InputError
from tests.test_ansible_run_live import _recorder

FIXTURES = Path(__file__).parent / "fixtures" / "runner_events"
RUNNER = Path(sys.executable).parent / "ansible-runner"

pytestmark = pytest.mark.skipif(not RUNNER.exists(), reason="ansible-runner is in requirements-awx.lock (make test)")


def awx_private_data_dir(pdd: Path, *, extravars: dict[str, Any], cmdline: str, limit: str) -> Path:
    """AWX's layout: project/ (the project checkout), inventory/hosts, env/{extravars,settings,envvars,cmdline}."""
    shutil.copytree(FIXTURES, pdd / "project", ignore=shutil.ignore_patterns("*.jsonl", "*.json", "*.py"))
    (pdd / "inventory").mkdir()
    shutil.copy(FIXTURES / "inventory.ini", pdd / "inventory" / "hosts")
    env = pdd / "env"
    env.mkdir()
    (env / "extravars").write_text(json.dumps(extravars))
    settings = {"job_timeout": 600, "idle_timeout": 300, "suppress_ansible_output": True}
    (env / "settings").write_text(json.dumps(settings))
    # What an execution environment's image sets (ansible/execution-environment.yml): the project's ansible.cfg.
    (env / "envvars").write_text(json.dumps({"ANSIBLE_CONFIG": str(pdd / "project" / "ansible.cfg"),
                                             "ANSIBLE_LOCAL_TEMP": str(pdd / "tmp-local")}))
    (env / "cmdline").write_text(f"{cmdline} --limit {limit}")
    return pdd


def _drifted(tmp: Path) -> tuple[Path, dict[str, Any]]:
    """Converge node-a and node-b with the fixture playbook, then drift both (as record.py's ``check`` does)."""
    rec = _recorder()
    workdir = tmp / "work"
    workdir.mkdir()
    extravars = {"workdir": str(workdir), "broken_host": "none"}
    converge, _ = rec._run(tmp, workdir, "converge", extravars=extravars, limit="node-a,node-b")
    assert converge.ok, converge.verdict()
    (workdir / "node-a.conf").write_text("host=node-a\nmtu=1500\n", encoding="utf-8")
    (workdir / "node-b-datasets").rmdir()
    return workdir, extravars


def _items(report: DriftReport) -> list[tuple[Any, ...]]:
    return sorted((i.host, i.component, i.kind, i.task, i.message, i.diff, i.disruptive, i.severity)
                  for i in report.items)


@pytest.mark.slow
def test_ansible_runner_check_job_gives_gpufleets_drift_report(tmp_path: Path) -> None:
    _, extravars = _drifted(tmp_path)
    # gpufleet drift's way: its own pipe, check + diff.
    rec = _recorder()
    raw = RawResults()
    events: list[dict[str, Any]] = []

    def sink(e: Any) -> None:
        raw(e)
        events.append(dict(e))

    ours = rec.run_playbook(rec.PLAYBOOK, rec.INVENTORY, project_dir=FIXTURES, private_data_dir=tmp_path / "pdd-ours",
                            live=False, diff=True, check=True, limit="node-a,node-b", extravars=extravars,
                            envvars={"ANSIBLE_CONFIG": str(FIXTURES / "ansible.cfg")}, on_event=sink)
    expected = build_report(ours, raw)
    assert {i.host for i in expected.items} == {"node-a", "node-b"}
    # AWX's way: ansible-runner over an AWX-shaped private data dir.
    pdd = awx_private_data_dir(tmp_path / "pdd-awx", extravars=extravars, cmdline="--check --diff",
                               limit="node-a,node-b")
    # AWX's execution environment has ansible-playbook on its PATH; here it is the venv's.
    env = {**os.environ, "PATH": f"{RUNNER.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run([str(RUNNER), "run", str(pdd), "-p", "site.yml", "--ident", "drift-1"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    artifacts = pdd / "artifacts" / "drift-1"
    assert (artifacts / "status").read_text() == "successful"
    assert sorted(artifacts.joinpath("job_events").glob("*.json")), "ansible-runner wrote no job_events"
    # Every way of naming the job's events reads the same job.
    for where in (pdd, artifacts, artifacts / "job_events"):
        job = read_job_events(where)
        assert (job.rc, job.status, job.check) == (0, "successful", True)
    report, result = report_from_events(read_job_events(pdd))
    assert _items(report) == _items(expected)
    assert report.exit_code == expected.exit_code == 2
    assert result.hosts.keys() == ours.hosts.keys()
    # The CLI: same report, the job's events instead of a run, exit 2 (drifted), JSON equal to the fold's.
    cli = CliRunner().invoke(app, ["drift", "--stack", "awx-job", "--events", str(pdd), "--json",
                                   "--textfile", str(tmp_path / "drift.prom")])
    assert cli.exit_code == 2, cli.output
    data = json.loads(cli.stdout)
    assert data["items"] == report.to_json()["items"] and data["stack"] == "awx-job"
    assert 'stack="awx-job"' in (tmp_path / "drift.prom").read_text()
    summary = CliRunner().invoke(app, ["report", "--events", str(artifacts), "--json"])
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.stdout)["run"]["hosts"].keys() == {"node-a", "node-b"}


def _write_awx_listing(path: Path, events: list[dict[str, Any]], pages: int) -> None:
    """AWX's API shape: ``{"count", "next", "results": [...]}`` pages, here saved as a list of pages."""
    size = max(1, len(events) // pages + 1)
    docs = [{"count": len(events), "next": None, "results": events[i:i + size]} for i in range(0, len(events), size)]
    path.write_text(json.dumps(docs if pages > 1 else docs[0]))


@pytest.mark.parametrize("pages", [1, 3])
def test_awx_listing_and_jsonl_give_the_recorded_report(tmp_path: Path, pages: int) -> None:
    from gpufleet.ansible_run.recording import read_events

    events = read_events(FIXTURES / "check.jsonl")
    for n, e in enumerate(events, 1):
        e["counter"] = n
    shuffled = list(reversed(events))  # AWX pages may come in any order: the counter orders them
    _write_awx_listing(tmp_path / "job_events.json", shuffled, pages)
    listed = read_job_events(tmp_path / "job_events.json")
    lines = read_job_events(FIXTURES / "check.jsonl")
    assert listed.check is None and listed.status == "successful" and listed.rc == 0
    assert [e["event"] for e in listed.events] == [e["event"] for e in events]
    assert _items(report_from_events(listed)[0]) == _items(report_from_events(lines)[0])
    assert report_from_events(listed)[0].items, "the recorded check run has drift"


def test_a_converge_job_is_not_a_drift_check(tmp_path: Path) -> None:
    art = tmp_path / "artifacts" / "1"
    (art / "job_events").mkdir(parents=True)
    (art / "job_events" / "1-a.json").write_text(json.dumps({"event": "playbook_on_start", "counter": 1,
                                                             "event_data": {}}))
    (art / "command").write_text(json.dumps({"command": ["ansible-playbook", "-i", "inv", "site.yml"],
                                             "env": {"SECRET_TOKEN": "s3cr3t"}}))
    (art / "rc").write_text("0")
    (art / "status").write_text("successful")
    with pytest.raises(InputError, match="without --check"):
        report_from_events(read_job_events(tmp_path))
    out = CliRunner().invoke(app, ["drift", "--events", str(tmp_path), "--json"])
    assert out.exit_code == 1 and "without --check" in json.loads(out.stdout)["error"]["message"]
    assert "s3cr3t" not in out.output


@pytest.mark.parametrize(("content", "message"), [
    ("", "no events"),
    ("{not json\n", "not JSON"),
    ('{"count": 1, "results": 5}', "'results' is not a list"),
    ('[{"no_event": 1}]', "not a playbook event"),
    ('{"event": "runner_on_ok", "event_data": []}\n', "'event_data' is not an object"),
])
def test_bad_event_files_get_the_contract(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "events.json"
    f.write_text(content)
    out = CliRunner().invoke(app, ["drift", "--events", str(f), "--json"])
    assert out.exit_code == 1, out.output
    assert message in json.loads(out.stdout)["error"]["message"]
    assert "Traceback" not in out.output


def test_events_refuse_options_of_a_run(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["drift", "--events", str(FIXTURES / "check.jsonl"), "--skew", "--json"])
    assert out.exit_code == 1 and "--skew" in json.loads(out.stdout)["error"]["message"]
    several = tmp_path / "pdd"
    for ident in ("a", "b"):
        (several / "artifacts" / ident / "job_events").mkdir(parents=True)
    out = CliRunner().invoke(app, ["drift", "--events", str(several), "--json"])
    assert out.exit_code == 1 and "holds 2 runs" in json.loads(out.stdout)["error"]["message"]
