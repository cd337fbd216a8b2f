"""gpufleet.ansible_run on recorded playbook events (tests/fixtures/runner_events, ansible-runner's event shape)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import (
    ANSIBLE_CFG,
    RunResult,
    TaskResult,
    build_result,
    changes_by_host,
    run_playbook,
    summary,
)
from gpufleet.ansible_run.display import plain_line, progress_table
from gpufleet.ansible_run.events import ResultBuilder
from gpufleet.ansible_run.recording import read_events, scrub_events
from gpufleet.ansible_run.results import MAX_RES_STRING, trim_res
from gpufleet.ansible_run.runner import playbook_args, runner_env

FIXTURES = Path(__file__).parent / "fixtures" / "runner_events"


def load(name: str, *, drop_stats: bool = False) -> RunResult:
    events = read_events(FIXTURES / f"{name}.jsonl")
    if drop_stats:
        events = [e for e in events if e["event"] != "playbook_on_stats"]
    meta = json.loads((FIXTURES / f"{name}.meta.json").read_text())
    return build_result(events, rc=meta["rc"], status=meta["status"], check=meta["check"])


def task(result: RunResult, host: str, label: str) -> TaskResult:
    (found,) = [t for t in result.tasks if t.host == host and t.label == label]
    return found


def counts(result: RunResult) -> dict[str, dict[str, Any]]:
    return {h: s.to_json() for h, s in result.hosts.items()}


RUN_RECAP = {
    "node-a": {
        "ok": 6,
        "changed": 3,
        "failed": 0,
        "skipped": 2,
        "unreachable": 0,
        "rescued": 0,
        "ignored": 1,
    },
    "node-b": {
        "ok": 4,
        "changed": 2,
        "failed": 1,
        "skipped": 1,
        "unreachable": 0,
        "rescued": 0,
        "ignored": 1,
    },
    "node-c": {
        "ok": 0,
        "changed": 0,
        "failed": 0,
        "skipped": 0,
        "unreachable": 1,
        "rescued": 0,
        "ignored": 0,
    },
}


def test_run_recap_counts_and_states() -> None:
    result = load("run")
    got = counts(result)
    assert {h: {k: v for k, v in s.items() if k != "state"} for h, s in got.items()} == RUN_RECAP
    assert {h: s["state"] for h, s in got.items()} == {
        "node-a": "done",
        "node-b": "failed",
        "node-c": "unreachable",
    }
    assert result.finished
    assert result.rc == 4 and result.status == "failed"
    assert result.failed_hosts == ["node-b"]
    assert result.unreachable_hosts == ["node-c"]
    assert result.ok is False


def test_counting_from_task_events_matches_the_recap() -> None:
    # The live display counts before playbook_on_stats exists; it must agree with PLAY RECAP.
    for name in ("run", "check"):
        with_stats, without = load(name), load(name, drop_stats=True)
        assert not without.finished
        assert {h: s.to_json() for h, s in without.hosts.items()} == counts(with_stats) | {
            h: {**s, "state": "running"} for h, s in counts(with_stats).items() if s["state"] == "done"
        }


def test_changed_tasks_per_host() -> None:
    got = {h: [t.label for t in ts] for h, ts in changes_by_host(load("run")).items()}
    assert got == {
        "node-a": ["Write the host config", "Create the cache directories", "demo : Write the role marker"],
        "node-b": ["Write the host config", "Create the cache directories"],
        "node-c": [],
    }


def test_copy_diff_and_loop_diffs() -> None:
    result = load("run")
    assert task(result, "node-a", "Write the host config").diff == [
        {"before": "", "after": "host=node-a\nmtu=9000\n", "after_header": "{workdir}/node-a.conf"}
    ]
    loop = task(result, "node-b", "Create the cache directories")
    assert loop.diff == [
        {
            "before": {"path": "{workdir}/node-b-models", "state": "absent"},
            "after": {"path": "{workdir}/node-b-models", "state": "directory"},
        },
        {
            "before": {"path": "{workdir}/node-b-datasets", "state": "absent"},
            "after": {"path": "{workdir}/node-b-datasets", "state": "directory"},
        },
    ]
    assert [(i.item, i.status, i.changed) for i in loop.items] == [
        ("models", "changed", True),
        ("datasets", "changed", True),
    ]
    assert loop.status == "changed" and loop.msg == "All items completed"
    assert all("diff" not in r and "invocation" not in r for r in loop.res["results"])


def test_ignored_failure_is_not_a_host_failure() -> None:
    result = load("run")
    probe = task(result, "node-a", "Probe a missing tool")
    assert (probe.status, probe.ignored, probe.changed) == ("failed", True, False)
    assert probe.msg == "non-zero return code"
    assert probe.res["rc"] == 1 and probe.res["cmd"] == ["/bin/false"]
    assert "stdout_lines" not in probe.res and "invocation" not in probe.res
    assert [(t.host, t.label, t.msg) for t in result.failures] == [
        (
            "node-c",
            "Check the work directory",
            "Task failed: Failed to connect to the host via ssh: "
            "ssh: connect to host 127.0.0.1 port 1: Connection refused",
        ),
        ("node-b", "Refuse the broken node", "node-b is marked broken"),
    ]


def test_skipped_role_play_and_action_fields() -> None:
    result = load("run")
    skipped = task(result, "node-a", "Tune GPU clocks")
    assert (skipped.status, skipped.changed, skipped.diff, skipped.msg) == ("skipped", False, [], None)
    marker = task(result, "node-a", "demo : Write the role marker")
    assert (marker.role, marker.play, marker.action) == (
        "demo",
        "Apply the demo role",
        "ansible.builtin.copy",
    )
    assert marker.task_path == "{fixture_dir}/roles/demo/tasks/main.yml:2"
    # node-b failed in play 1 and node-c was unreachable, so only node-a ran the role.
    assert {t.host for t in result.tasks if t.role == "demo"} == {"node-a"}


def test_tags_come_from_the_events() -> None:
    # gpufleet's callback (gpufleet_events) put them there, inherited ones included: the demo role is applied
    # with tags: [demo_role] in site.yml, which its tasks' file never names.
    result = load("run")
    assert task(result, "node-b", "Write the host config").tags == ["config", "network"]
    assert task(result, "node-c", "Check the work directory").tags == ["inspect"]
    assert task(result, "node-a", "demo : Write the role marker").tags == ["demo", "demo_role"]
    assert task(result, "node-a", "demo : Report the role result").tags == ["demo_role"]
    assert task(result, "node-a", "Tune GPU clocks").tags == []


def test_tags_of_another_task_are_not_taken() -> None:
    # Recorded through ansible-runner, an event could still carry the previous task's entry.
    start = {"event": "runner_on_ok", "event_data": {
        "host": "h", "task": "t2", "task_uuid": "u2", "res": {},
        "task_tags": {"task_uuid": "u1", "tags": ["config"]}}}
    assert build_result([start]).tasks[0].tags == []
    start["event_data"]["task_tags"] = {"task_uuid": "u2", "tags": ["network"]}  # type: ignore[index]
    assert build_result([start]).tasks[0].tags == ["network"]


def test_check_run_reports_what_would_change() -> None:
    result = load("check")
    assert result.check and result.ok
    got = {h: [t.label for t in ts] for h, ts in changes_by_host(result).items()}
    assert got == {"node-a": ["Write the host config"], "node-b": ["Create the cache directories"]}
    assert task(result, "node-a", "Write the host config").diff == [
        {
            "before": "host=node-a\nmtu=1500\n",
            "after": "host=node-a\nmtu=9000\n",
            "before_header": "{workdir}/node-a.conf",
            "after_header": "{workdir}/node-a.conf",
        }
    ]
    # Unchanged files/dirs report before == after ({"path": ...}); those are not diffs.
    assert task(result, "node-b", "Write the host config").diff == []
    loop = task(result, "node-b", "Create the cache directories")
    assert [(i.item, i.status) for i in loop.items] == [("models", "ok"), ("datasets", "changed")]
    assert loop.diff == [
        {
            "before": {"path": "{workdir}/node-b-datasets", "state": "absent"},
            "after": {"path": "{workdir}/node-b-datasets", "state": "directory"},
        }
    ]
    # ansible skips command tasks in check mode.
    assert task(result, "node-a", "Probe a missing tool").status == "skipped"
    assert result.verdict() == "OK: 2 hosts, 2 task(s) would change (check mode, nothing was changed)"


def test_run_verdict() -> None:
    assert load("run").verdict() == (
        "FAILED: failed on node-b; unreachable: node-c; rc=4; 3 hosts, 5 task(s) changed; "
        "rerun them: --limit node-b,node-c"
    )


def test_json_shape() -> None:
    data = load("run").to_json()
    json.dumps(data)  # must be serialisable as is
    assert set(data) == {
        "schema", "ok", "rc", "status", "check", "verdict", "hosts", "changed", "failed", "tasks", "log_tail", "rerun",
        "notices",
    }  # fmt: skip
    assert (data["schema"], data["ok"], data["rc"], data["status"], data["check"]) == (
        1,
        False,
        4,
        "failed",
        False,
    )
    assert data["hosts"]["node-b"] == {**RUN_RECAP["node-b"], "state": "failed"}
    assert data["changed"]["node-b"] == ["Write the host config", "Create the cache directories"]
    assert data["failed"][1] == {
        "host": "node-b",
        "task": "Refuse the broken node",
        "msg": "node-b is marked broken",
        "lost": None,
        "duration": None,
    }
    assert len(data["tasks"]) == 15
    conf = next(t for t in data["tasks"] if t["host"] == "node-b" and t["task"] == "Write the host config")
    assert set(conf) == {
        "host", "play", "role", "task", "action", "status", "changed", "ignored", "msg", "tags", "task_path",
        "diff", "items", "res", "lost", "duration",
    }  # fmt: skip
    # sha1 of "host=node-b\nmtu=9000\n", the content the task writes.
    assert conf["res"]["checksum"] == "3dbf80168e486e8526ef87444d22a280a2341685"
    assert (conf["status"], conf["changed"], conf["tags"], conf["items"]) == (
        "changed",
        True,
        ["config", "network"],
        [],
    )
    assert data["log_tail"] == []


def _ev(name: str, host: str | None = None, **data: Any) -> dict[str, Any]:
    ed: dict[str, Any] = {
        "play": "p",
        "task": "t",
        "task_uuid": "u1",
        "task_action": "ansible.builtin.command",
    }
    if host:
        ed["host"] = host
    ed.update(data)
    return {"event": name, "event_data": ed}


def test_rescued_failure_does_not_fail_the_run() -> None:
    events = [
        _ev("runner_on_start", "h1"),
        _ev("runner_on_failed", "h1", res={"msg": "boom"}, ignore_errors=None),
    ]
    builder = ResultBuilder()
    for e in events:
        builder.add(e)
    assert builder.result.hosts["h1"].state == "failed"
    assert [t.msg for t in builder.result.failures] == ["boom"]
    stats = {"ok": {"h1": 1}, "rescued": {"h1": 1}, "processed": {"h1": 1}}
    result = build_result(
        [*events, {"event": "playbook_on_stats", "event_data": stats}], rc=0, status="successful"
    )
    assert result.hosts["h1"].to_json() == {
        "ok": 1, "changed": 0, "failed": 0, "skipped": 0, "unreachable": 0, "rescued": 1, "ignored": 0,
        "state": "done",
    }  # fmt: skip
    assert result.failures == [] and result.ok


def test_nonzero_rc_without_failed_hosts_is_not_ok() -> None:
    log = {"event": "verbose", "stdout": "\x1b[0;31mERROR! the playbook: nope.yml could not be found\x1b[0m"}
    result = build_result([log], rc=1, status="failed")
    assert not result.ok
    assert result.log_tail == ["ERROR! the playbook: nope.yml could not be found"]
    assert result.verdict() == "FAILED: ansible-playbook exited 1 (failed); 0 hosts, 0 task(s) changed"
    text = _render(summary(result))
    assert "ERROR! the playbook: nope.yml could not be found" in text


def test_include_tasks_is_not_counted_and_current_task_tracks_start() -> None:
    builder = ResultBuilder()
    builder.add(_ev("runner_on_start", "h1", role="r", task="Load vars"))
    assert builder.result.hosts["h1"].current_task == "r : Load vars"
    builder.add(_ev("runner_on_ok", "h1", task_action="ansible.builtin.include_tasks", res={}))
    assert builder.result.hosts["h1"].ok == 0 and builder.result.hosts["h1"].current_task is None


def test_trim_res_drops_bulk_and_cuts_long_strings() -> None:
    res = {
        "stdout": "x" * (MAX_RES_STRING + 5),
        "stdout_lines": ["x"],
        "invocation": {"module_args": {}},
        "ansible_facts": {"a": 1},
        "_ansible_no_log": False,
        "rc": 0,
        "results": [{"diff": {"before": 1}, "item": "a"}],
    }
    assert trim_res(res) == {
        "stdout": "x" * MAX_RES_STRING + "... [5 more characters]",
        "rc": 0,
        "results": [{"item": "a"}],
    }


def _render(renderable: Any, width: int = 140) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_plain_progress_lines() -> None:
    run, check = load("run"), load("check")
    assert plain_line(task(run, "node-b", "Refuse the broken node")) == (
        "node-b: failed: Refuse the broken node: node-b is marked broken"
    )
    assert plain_line(task(run, "node-a", "Probe a missing tool")) == (
        "node-a: ignored: Probe a missing tool: non-zero return code"
    )
    assert plain_line(task(run, "node-a", "Create the cache directories")) == (
        "node-a: changed: Create the cache directories (2 items)"
    )
    assert plain_line(task(check, "node-a", "Write the host config"), check=True) == (
        "node-a: would-change: Write the host config"
    )


def test_summary_and_progress_tables_render() -> None:
    text = _render(summary(load("run")))
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") >= 6}
    assert [c.strip() for c in rows["node-a"].split("│")[2:7]] == ["6", "3", "0", "0", "2"]
    assert [c.strip() for c in rows["node-c"].split("│")[2:7]] == ["0", "0", "0", "1", "0"]
    assert "node-b: Refuse the broken node: node-b is marked broken" in text
    assert text.rstrip().endswith(
        "FAILED: failed on node-b; unreachable: node-c; rc=4; 3 hosts, 5 task(s) changed; "
        "rerun them: --limit node-b,node-c"
    )

    partial = ResultBuilder()
    for e in read_events(FIXTURES / "run.jsonl"):
        partial.add(e)
        if e["event"] == "runner_on_start" and e["event_data"]["task"] == "Write the host config":
            break
    progress = _render(progress_table(partial.result, title="site.yml"))
    assert "Write the host config" in progress and "running" in progress and "unreachable" in progress


def test_scrub_events_makes_recordings_stable() -> None:
    raw: list[dict[str, Any]] = [
        {
            "event": "runner_on_ok",
            "uuid": "aaa",
            "parent_uuid": "bbb",
            "created": "2026-01-01T00:00:00",
            "stdout": "\x1b[0;33mchanged\x1b[0m",
            "pid": 7,
            "event_data": {
                "task_uuid": "bbb",
                "start": "t0",
                "duration": 1.5,
                "res": {
                    "dest": "/tmp/w1/x.conf",
                    "src": "/tmp/p/rtmp/ansible-tmp-1795991928.87-15276-141114575938038/.source.conf",
                    "delta": "0:00:00.1",
                    "invocation": {"module_args": {}},
                },
            },
        },
        {"event": "verbose", "uuid": "ccc", "stdout": "\x1b[0;31mERROR in /tmp/w1\x1b[0m"},
    ]
    assert scrub_events(raw, {"/tmp/w1": "{workdir}", "/tmp/p": "{tmp}"}) == [
        {
            "event": "runner_on_ok",
            "uuid": "uuid-1",
            "parent_uuid": "uuid-2",
            "event_data": {
                "task_uuid": "uuid-2",
                "start": "<time>",
                "duration": "<time>",
                "res": {
                    "dest": "{workdir}/x.conf",
                    "src": "{tmp}/rtmp/ansible-tmp-X/.source.conf",
                    "delta": "<time>",
                },
            },
        },
        {"event": "verbose", "uuid": "uuid-3", "stdout": "ERROR in {workdir}"},
    ]


def test_runner_env_and_cmdline(tmp_path: Path) -> None:
    env = runner_env(tmp_path, {"ANSIBLE_REMOTE_TEMP": "/x", "ANSIBLE_CONFIG": "/other.cfg"})
    assert env["ANSIBLE_CONFIG"] == "/other.cfg"
    assert env["ANSIBLE_REMOTE_TEMP"] == "/x"
    assert env["ANSIBLE_LOCAL_TEMP"] == str(tmp_path / "tmp")
    assert env["ANSIBLE_CACHE_PLUGIN"] == "memory"
    assert (
        runner_env(tmp_path, None)["ANSIBLE_CONFIG"]
        == str(REPO_ROOT / "ansible" / "ansible.cfg")
        == str(ANSIBLE_CFG)
    )
    assert (Path(env["PATH"].split(":")[0]) / "ansible-playbook").exists()
    # The caller's callbacks stay enabled next to gpufleet's.
    own = runner_env(tmp_path, {"ANSIBLE_CALLBACKS_ENABLED": "profile_tasks", "ANSIBLE_CALLBACK_PLUGINS": "/cb"})
    assert own["ANSIBLE_CALLBACKS_ENABLED"] == "profile_tasks,gpufleet_events"
    assert own["ANSIBLE_CALLBACK_PLUGINS"] == f"/cb:{REPO_ROOT / 'gpufleet' / 'ansible_run' / 'callback_plugins'}"
    # One argument per value, no shell; extra vars only from a file.
    args = playbook_args(Path("/p/site.yml"), Path("/i/hosts.yml"), limit="gpu-0,gpu-1", tags=["a", "b"],
                         forks=7, extravars_file=Path("/d/env/extravars.json"), check=True, diff=True)
    assert Path(args[0]).name == "ansible-playbook"
    assert args[1:] == ["-i", "/i/hosts.yml", "--limit", "gpu-0,gpu-1", "--tags", "a,b", "--forks", "7",
                        "--extra-vars", "@/d/env/extravars.json", "--check", "--diff", "/p/site.yml"]
    assert playbook_args(Path("/p/site.yml"), Path("/i/hosts.yml"))[1:] == ["-i", "/i/hosts.yml", "/p/site.yml"]


def test_run_playbook_refuses_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"^playbook not found: .*/nope\.yml$"):
        run_playbook(Path("nope.yml"), FIXTURES / "inventory.ini", project_dir=tmp_path, live=False)
    with pytest.raises(FileNotFoundError, match=r"^inventory not found: .*/missing\.ini$"):
        run_playbook(FIXTURES / "site.yml", tmp_path / "missing.ini", live=False)


class _FakeAnsible:
    """Stands in for ansible-playbook (runner._execute): replays a recording through the event handler."""

    def __init__(self, name: str) -> None:
        self.events = read_events(FIXTURES / f"{name}.jsonl")
        self.meta = json.loads((FIXTURES / f"{name}.meta.json").read_text())
        self.args: list[str] = []
        self.kwargs: dict[str, Any] = {}
        self.extravars: Any = None

    def __call__(self, args: list[str], **kwargs: Any) -> int:
        self.args, self.kwargs = args, kwargs
        if "--extra-vars" in args:
            self.extravars = json.loads(Path(args[args.index("--extra-vars") + 1][1:]).read_text())
        (kwargs["artifacts"] / "stderr").write_text("")
        for e in self.events:
            assert kwargs["handle"](e) is True
        return int(self.meta["rc"])


def test_run_playbook_passes_options_and_shows_live_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = _FakeAnsible("check")
    monkeypatch.setattr("gpufleet.ansible_run.runner._execute", fake)
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system="standard")
    seen: list[str] = []
    result = run_playbook(
        Path("site.yml"),
        FIXTURES / "inventory.ini",
        project_dir=FIXTURES,
        check=True,
        diff=True,
        tags=["config", "demo"],
        limit="node-a,node-b",
        forks=7,
        extravars={"workdir": "/w"},
        console=console,
        on_event=lambda e: seen.append(e["event"]),
    )
    args, kw = fake.args, fake.kwargs
    assert args[-1] == str(FIXTURES / "site.yml")
    assert args[1:3] == ["-i", str((FIXTURES / "inventory.ini").resolve())]
    assert "--check" in args and "--diff" in args
    assert args[args.index("--tags") + 1] == "config,demo"
    assert args[args.index("--limit") + 1] == "node-a,node-b"
    assert args[args.index("--forks") + 1] == "7"
    assert fake.extravars == {"workdir": "/w"}
    assert kw["cwd"] == FIXTURES
    assert kw["env"]["ANSIBLE_CONFIG"] == str(ANSIBLE_CFG)
    assert kw["env"]["ANSIBLE_CALLBACKS_ENABLED"] == "gpufleet_events"
    assert kw["env"]["ANSIBLE_CALLBACK_PLUGINS"] == str(REPO_ROOT / "gpufleet" / "ansible_run" / "callback_plugins")
    assert kw["keep_events"] is None
    # Facts are gathered afresh by every gpufleet run and kept only while it runs (no cache files).
    assert kw["env"]["ANSIBLE_CACHE_PLUGIN"] == "memory"
    assert "ANSIBLE_CACHE_PLUGIN_CONNECTION" not in kw["env"]
    assert len(seen) == len(fake.events)
    # A temp private data dir is removed again and not reported.
    assert result.artifact_dir is None and not kw["artifacts"].exists()
    assert result.check and result.ok and result.rc == 0 and result.status == "successful"
    assert [t.label for t in changes_by_host(result)["node-a"]] == ["Write the host config"]
    # Tags come with the (recorded) events.
    assert task(result, "node-a", "Write the host config").tags == ["config", "network"]
    text = out.getvalue()
    assert "\x1b[" in text  # a terminal gets the rich live table and a coloured summary
    assert "Play recap (check mode)" in text
    assert "OK: 2 hosts, 2 task(s) would change (check mode, nothing was changed)" in text
    assert "node-a: changed:" not in text  # no plain lines on a terminal


def test_run_playbook_plain_lines_without_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = _FakeAnsible("run")
    monkeypatch.setattr("gpufleet.ansible_run.runner._execute", fake)
    out = io.StringIO()
    result = run_playbook(
        FIXTURES / "site.yml",
        FIXTURES / "inventory.ini",
        private_data_dir=tmp_path / "pdd",
        console=Console(file=out, width=160, force_terminal=False),
    )
    lines = out.getvalue().splitlines()
    # Hosts run in parallel, so the recorded order among them is not fixed; the first task is.
    assert sorted(lines[:3]) == [
        "node-a: ok: Check the work directory",
        "node-b: ok: Check the work directory",
        "node-c: unreachable: Check the work directory: Task failed: Failed to connect to the host via ssh: "
        "ssh: connect to host 127.0.0.1 port 1: Connection refused",
    ]
    assert sum(1 for line in lines if line.startswith("node-")) >= 15
    assert lines[-1] == ("FAILED: failed on node-b; unreachable: node-c; rc=4; 3 hosts, 5 task(s) changed; "
                         "rerun them: --limit node-b,node-c")
    assert result.status == "failed" and "--extra-vars" not in fake.args
    assert result.artifact_dir == str(fake.kwargs["artifacts"])
    assert Path(result.artifact_dir).parent == (tmp_path / "pdd").resolve() / "artifacts"


def test_run_playbook_quiet_mode_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpufleet.ansible_run.runner._execute", _FakeAnsible("run"))
    out = io.StringIO()
    result = run_playbook(
        FIXTURES / "site.yml", FIXTURES / "inventory.ini", live=False, console=Console(file=out)
    )
    assert out.getvalue() == ""
    assert result.rc == 4 and result.failed_hosts == ["node-b"]


def test_what_ansible_says_on_stderr_is_the_log_tail(tmp_path: Path) -> None:
    # A real ansible-playbook that fails before its first play: no events, the error from stderr.
    bad = tmp_path / "bad.yml"
    bad.write_text("- hosts: all\n  tasks:\n    - ansible.builtin.nosuchmodule: {}\n")
    result = run_playbook(bad, FIXTURES / "inventory.ini", live=False, private_data_dir=tmp_path / "pdd")
    assert result.rc != 0 and result.status == "failed" and not result.tasks
    assert any("nosuchmodule" in line for line in result.log_tail)
    assert not result.ok


def test_a_module_s_notice_reaches_the_summary_text_and_json_from_its_result_not_its_task_name() -> None:
    # What the dpkg_hold module returns when it finished an interrupted dpkg run (tests/test_dpkg_hold_module.py);
    # the task is renamed on purpose: the line comes from the result.
    notice = {"event": "recovered interrupted dpkg",
              "detail": "nvidia-driver-570-open 570.172.08-0ubuntu1 (iU), nvidia-utils-570 570.133.20-0ubuntu1 (iHR)"}
    events = [
        _ev("runner_on_ok", "gpu-0", role="nvidia_driver", task="Anything", task_action="dpkg_hold",
            res={"changed": True, "recovered": True, "gpufleet_notice": notice}),
        _ev("runner_on_ok", "gpu-1", role="nvidia_driver", task="Anything", task_action="dpkg_hold",
            task_uuid="u2", res={"changed": False, "recovered": False}),
        {"event": "playbook_on_stats", "event_data": {"ok": {"gpu-0": 1, "gpu-1": 1}, "changed": {"gpu-0": 1},
                                                      "processed": {"gpu-0": 1, "gpu-1": 1}}},
    ]
    result = build_result(events, rc=0, status="successful")
    line = ("recovered interrupted dpkg on gpu-0: nvidia-driver-570-open 570.172.08-0ubuntu1 (iU), "
            "nvidia-utils-570 570.133.20-0ubuntu1 (iHR)")
    assert [n.line for n in result.notices] == [line]
    assert result.to_json()["notices"] == [{"host": "gpu-0", **notice, "line": line}]
    text = _render(summary(result), width=200)
    assert line in text and text.index(line) < text.index("OK: 2 hosts")
    assert build_result(events[1:], rc=0, status="successful").to_json()["notices"] == []


def test_the_callback_and_the_reader_agree_on_their_names() -> None:
    # The callback runs inside ansible-playbook (also where gpufleet is not installed, e.g. AWX), so it names the
    # variable and the tags key itself; this pins both to the reader's.
    import importlib.util

    from gpufleet.ansible_run import runner
    from gpufleet.ansible_run.events import TAGS_KEY

    spec = importlib.util.spec_from_file_location("gpufleet_events", runner.CALLBACK_DIR / "gpufleet_events.py")
    assert spec and spec.loader
    callback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(callback)
    assert (callback.FD_ENV, callback.TAGS_KEY) == (runner.EVENT_FD_ENV, TAGS_KEY)
    assert callback.CallbackModule.CALLBACK_NAME in runner.CALLBACKS
