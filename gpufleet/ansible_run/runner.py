"""Run a playbook through ansible-runner with live per-host progress."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ansible_runner
from rich.console import Console
from rich.live import Live

from gpufleet import REPO_ROOT
from gpufleet.ansible_run.display import plain_line, print_summary, progress_table
from gpufleet.ansible_run.events import ResultBuilder
from gpufleet.ansible_run.results import RunResult

ANSIBLE_CFG = REPO_ROOT / "ansible" / "ansible.cfg"
#: Callbacks gpufleet adds to every run: gpufleet_task_tags puts each task's tags into its events.
CALLBACK_DIR = Path(__file__).resolve().parent / "callback_plugins"
CALLBACKS = ("gpufleet_task_tags",)

EventSink = Callable[[Mapping[str, Any]], None]


def _path_with_our_ansible() -> str:
    """PATH with this interpreter's bin dir first, so the pinned ansible-core of this venv runs
    even when the venv is not activated (ansible-runner starts ``ansible-playbook`` from PATH)."""
    bindir = str(Path(sys.executable).parent)
    rest = os.environ.get("PATH", "")
    return bindir + (os.pathsep + rest if rest else "")


def runner_env(private_data_dir: Path, envvars: Mapping[str, str] | None) -> dict[str, str]:
    """Environment for ansible-playbook; the caller's envvars win over our defaults."""
    env = {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "PATH": _path_with_our_ansible(),
        # Default local temp is ~/.ansible/tmp; keep it with the run so nothing leaks into $HOME.
        "ANSIBLE_LOCAL_TEMP": str(private_data_dir / "tmp"),
    }
    given = {k: str(v) for k, v in (envvars or {}).items()}
    # ansible-runner appends its own display callback's folder to ANSIBLE_CALLBACK_PLUGINS; the caller's
    # callback folders and enabled callbacks are kept next to ours.
    env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(
        p for p in (given.pop("ANSIBLE_CALLBACK_PLUGINS", ""), str(CALLBACK_DIR)) if p)
    env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(
        c for c in (given.pop("ANSIBLE_CALLBACKS_ENABLED", ""), *CALLBACKS) if c)
    env.update(given)
    return env


def cmdline_args(check: bool, diff: bool) -> str:
    """Flags ansible-runner has no keyword for; it adds the playbook, inventory, limit itself."""
    args = ["--check"] if check else []
    if diff:
        args.append("--diff")
    return shlex.join(args)


@contextmanager
def _data_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="gpufleet-runner-") as tmp:
        yield Path(tmp)


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
        # True keeps the event in ansible-runner's artifacts (job_events/).
        return True

    def render() -> Any:
        with lock:
            return progress_table(builder.result, title=f"{playbook.name}" + (" (check)" if check else ""))

    with _data_dir(private_data_dir) as pdd:
        kwargs: dict[str, Any] = {
            "private_data_dir": str(pdd),
            "project_dir": str(project_dir),
            "playbook": str(playbook),
            "inventory": str(inventory.resolve()),
            "limit": limit,
            "extravars": dict(extravars or {}),
            "tags": ",".join(tags) if tags else None,
            "forks": forks,
            "cmdline": cmdline_args(check, diff) or None,
            "envvars": runner_env(pdd, envvars),
            "quiet": True,
            "event_handler": handle,
        }
        if live and not plain:
            with Live(console=console, get_renderable=render, refresh_per_second=8, transient=True):
                runner = ansible_runner.run(**kwargs)
        else:
            runner = ansible_runner.run(**kwargs)
        result = builder.result
        result.rc = int(runner.rc) if runner.rc is not None else -1
        result.status = str(runner.status)
        result.artifact_dir = str(runner.config.artifact_dir) if private_data_dir is not None else None
    if live:
        print_summary(result, console)
    return result
