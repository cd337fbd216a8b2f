"""Run a playbook with live per-host progress: ``ansible-playbook`` started here, its events read from a pipe.

gpufleet's callback plugin ``gpufleet_events`` (callback_plugins/gpufleet_events.py) writes every playbook, task
and host event as a JSON line to the pipe's write end, which the child inherits (``GPUFLEET_EVENT_FD``);
``ResultBuilder`` folds them while the playbook runs. ansible's own output (the default stdout callback) and its
stderr go to the run's artifacts. Until issue 17 this went through ansible-runner, whose per-event JSON files and
pexpect loop cost ~1.5-2 controller CPU s per run (docs/performance.md); the events keep its shape.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.live import Live

from gpufleet import REPO_ROOT
from gpufleet.ansible_run.display import plain_line, print_summary, progress_table
from gpufleet.ansible_run.events import ResultBuilder
from gpufleet.ansible_run.results import RunResult

ANSIBLE_CFG = REPO_ROOT / "ansible" / "ansible.cfg"
#: Callbacks gpufleet adds to every run: gpufleet_events writes the events gpufleet reads (with each task's tags).
CALLBACK_DIR = Path(__file__).resolve().parent / "callback_plugins"
CALLBACKS = ("gpufleet_events",)
#: Names the inherited file descriptor gpufleet_events writes to (the callback reads the same name).
EVENT_FD_ENV = "GPUFLEET_EVENT_FD"
#: How long an interrupted ansible-playbook gets to stop its workers before it is killed.
STOP_GRACE_S = 10.0

EventSink = Callable[[Mapping[str, Any]], None]


def ansible_playbook_bin() -> str:
    """The ``ansible-playbook`` of this interpreter's environment (the pinned ansible-core), found even when the
    venv is not activated; PATH otherwise."""
    here = Path(sys.executable).parent / "ansible-playbook"
    return str(here) if here.is_file() else "ansible-playbook"


def _path_with_our_ansible() -> str:
    """PATH with this interpreter's bin dir first (ansible's own helpers and ``ansible-galaxy`` from the venv)."""
    bindir = str(Path(sys.executable).parent)
    rest = os.environ.get("PATH", "")
    return bindir + (os.pathsep + rest if rest else "")


def runner_env(private_data_dir: Path, envvars: Mapping[str, str] | None) -> dict[str, str]:
    """Environment for ansible-playbook (on top of ours); the caller's envvars win over our defaults.

    Facts: every gpufleet run gathers them afresh and keeps them only while it runs (a cache shared between runs
    would keep a rebooted node's old ``kernel`` fact, which the driver role holds packages by); plain
    ``ansible-playbook`` runs keep ansible.cfg's hour-long cache. ansible's ``memory`` cache plugin does that
    without files: a file-backed plugin (ansible-runner gave each run its own jsonfile directory) is JSON-decoded
    again on every variable lookup of a host, ~3% of a no-op converge's controller CPU (docs/performance.md).
    """
    env = {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "PATH": _path_with_our_ansible(),
        # Default local temp is ~/.ansible/tmp; keep it with the run so nothing leaks into $HOME.
        "ANSIBLE_LOCAL_TEMP": str(private_data_dir / "tmp"),
        # Facts for this run only (see above).
        "ANSIBLE_CACHE_PLUGIN": "memory",
    }
    given = {k: str(v) for k, v in (envvars or {}).items()}
    # The caller's callback folders and enabled callbacks are kept next to ours.
    env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(
        p for p in (given.pop("ANSIBLE_CALLBACK_PLUGINS", ""), str(CALLBACK_DIR)) if p)
    env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(
        c for c in (given.pop("ANSIBLE_CALLBACKS_ENABLED", ""), *CALLBACKS) if c)
    env.update(given)
    return env


def playbook_args(
    playbook: Path,
    inventory: Path,
    *,
    limit: str | None = None,
    extravars_file: Path | None = None,
    check: bool = False,
    diff: bool = False,
    tags: list[str] | None = None,
    forks: int | None = None,
) -> list[str]:
    """The ``ansible-playbook`` command line (no shell: every value is one argument)."""
    args = [ansible_playbook_bin(), "-i", str(inventory)]
    if limit:
        args += ["--limit", limit]
    if tags:
        args += ["--tags", ",".join(tags)]
    if forks:
        args += ["--forks", str(forks)]
    if extravars_file is not None:
        # From a file, as ansible-runner passed them: values never pass through a shell or the command line.
        args += ["--extra-vars", f"@{extravars_file}"]
    if check:
        args.append("--check")
    if diff:
        args.append("--diff")
    args.append(str(playbook))
    return args


@contextmanager
def _data_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="gpufleet-runner-") as tmp:
        yield Path(tmp)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Interrupt ansible-playbook as Ctrl-C would (it stops its workers), then kill it if it lingers."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _execute(args: list[str], *, cwd: Path, env: dict[str, str], artifacts: Path,
             handle: Callable[[Mapping[str, Any]], object], keep_events: IO[str] | None) -> int:
    """Run ``args``; every event line goes to ``handle`` (and ``keep_events``). Returns the exit status."""
    read_fd, write_fd = os.pipe()
    env = {**env, EVENT_FD_ENV: str(write_fd)}
    with (artifacts / "stdout").open("wb") as out, (artifacts / "stderr").open("wb") as err:
        try:
            proc = subprocess.Popen(args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    pass_fds=(write_fd,))
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            # Only the child (and its workers) hold the write end now: end of file when they are all gone.
            os.close(write_fd)
        try:
            with os.fdopen(read_fd, encoding="utf-8", errors="replace") as events:
                for line in events:
                    if not line.strip():
                        continue
                    if keep_events is not None:
                        keep_events.write(line)
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue  # a line cut short by a killed writer: nothing to fold
                    if isinstance(event, dict):
                        handle(event)
            return proc.wait()
        finally:
            _stop(proc)


def run_playbook(
    playbook: Path,
    inventory: Path,
    *,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    check: bool = False,
    diff: bool = False,
    tags: list[str] | None = None,
    project_dir: Path = REPO_ROOT,
    private_data_dir: Path | None = None,
    console: Console | None = None,
    live: bool = True,
    envvars: dict[str, str] | None = None,
    forks: int | None = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """Run ``playbook`` against ``inventory`` and return what happened.

    With ``live`` the console shows a table of hosts while the playbook runs (plain lines, one per
    finished task and host, when the console is not a terminal) and the closing summary after it;
    with ``live=False`` nothing is printed (print ``display.summary(result)`` or ``result.to_json()``
    yourself). ansible's own output is suppressed either way; it stays in the artifacts when
    ``private_data_dir`` is given (otherwise a temp dir is used and removed). A relative
    ``playbook`` is relative to ``project_dir``. ``on_event`` sees every raw event (for recording).
    """
    playbook = playbook if playbook.is_absolute() else project_dir / playbook
    if not playbook.is_file():
        raise FileNotFoundError(f"playbook not found: {playbook}")
    if not inventory.exists():
        raise FileNotFoundError(f"inventory not found: {inventory}")
    console = console or Console()
    builder = ResultBuilder(check=check)
    lock = threading.Lock()
    plain = live and not console.is_terminal

    def handle(event: Mapping[str, Any]) -> bool:
        if on_event is not None:
            on_event(event)
        with lock:
            done = builder.add(event)
        if plain and done is not None:
            console.print(plain_line(done, check), markup=False, highlight=False, soft_wrap=True)
        return True

    def render() -> Any:
        with lock:
            return progress_table(builder.result, title=f"{playbook.name}" + (" (check)" if check else ""))

    with _data_dir(private_data_dir) as pdd:
        artifacts = pdd / "artifacts" / str(uuid.uuid4())
        artifacts.mkdir(parents=True)
        extravars_file = None
        if extravars:
            (pdd / "env").mkdir(exist_ok=True)
            extravars_file = pdd / "env" / "extravars.json"
            extravars_file.write_text(json.dumps(dict(extravars)), encoding="utf-8")
        args = playbook_args(playbook, inventory.resolve(), limit=limit, extravars_file=extravars_file,
                             check=check, diff=diff, tags=tags, forks=forks)
        # Callbacks the operator enabled in the environment (profile_tasks, ...) stay enabled next to ours.
        own = {k: os.environ[k] for k in ("ANSIBLE_CALLBACK_PLUGINS", "ANSIBLE_CALLBACKS_ENABLED") if k in os.environ}
        env = {**os.environ, **runner_env(pdd, {**own, **(envvars or {})})}

        def execute() -> int:
            keep = (artifacts / "events.jsonl").open("w", encoding="utf-8") if private_data_dir is not None else None
            try:
                rc = _execute(args, cwd=project_dir, env=env, artifacts=artifacts, handle=handle, keep_events=keep)
            finally:
                if keep is not None:
                    keep.close()
            # What ansible said outside the events (errors before the first play, warnings): the log tail.
            said = (artifacts / "stderr").read_text(encoding="utf-8", errors="replace").strip()
            if said:
                handle({"event": "verbose", "stdout": said})
            return rc

        if live and not plain:
            with Live(console=console, get_renderable=render, refresh_per_second=8, transient=True):
                rc = execute()
        else:
            rc = execute()
        result = builder.result
        result.rc = rc
        result.status = "successful" if rc == 0 else "failed"
        result.artifact_dir = str(artifacts) if private_data_dir is not None else None
    if live:
        print_summary(result, console)
    return result
