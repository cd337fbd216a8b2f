"""How a run looks to the operator: the live per-host table, plain CI lines, the closing summary."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpufleet.ansible_run.results import HostState, RunResult, TaskResult, TaskStatus

_STATE_STYLE: dict[HostState, str] = {
    "running": "cyan",
    "done": "green",
    "failed": "bold red",
    "unreachable": "bold magenta",
}
_STATUS_STYLE: dict[TaskStatus, str] = {
    "ok": "green",
    "changed": "yellow",
    "failed": "red",
    "skipped": "cyan",
    "unreachable": "magenta",
}


def _num(n: int, style: str) -> Text:
    return Text(str(n), style=style if n else "dim")


def progress_table(result: RunResult, title: str | None = None) -> Table:
    """One row per host: what it runs now, its counters, its state."""
    table = Table(title=title, title_justify="left", expand=False)
    table.add_column("host", no_wrap=True)
    table.add_column("task", overflow="ellipsis", max_width=60, no_wrap=True)
    for col in ("ok", "changed", "failed", "skipped", "unreach."):
        table.add_column(col, justify="right")
    table.add_column("state")
    for host, s in result.hosts.items():
        table.add_row(
            host,
            Text(s.current_task or "", style="dim" if s.state != "running" else ""),
            _num(s.ok, "green"),
            _num(s.changed, "yellow"),
            _num(s.failed, "red"),
            _num(s.skipped, "cyan"),
            _num(s.unreachable, "magenta"),
            Text(s.state, style=_STATE_STYLE[s.state]),
        )
    return table


def plain_line(task: TaskResult, check: bool = False) -> str:
    """One line per finished task per host, for logs without a terminal."""
    status: str = task.status
    if task.status == "failed" and task.ignored:
        status = "ignored"
    elif task.status == "changed" and check:
        status = "would-change"
    line = f"{task.host}: {status}: {task.label}"
    if task.items:
        line += f" ({len(task.items)} items)"
    if task.lost and task.status == "failed":
        line += f": {task.reason}"
    elif task.msg and (task.status in ("failed", "unreachable")):
        line += f": {task.msg.splitlines()[0]}"
    return line


def summary_table(result: RunResult) -> Table:
    table = Table(title="Play recap" + (" (check mode)" if result.check else ""), title_justify="left")
    table.add_column("host", no_wrap=True)
    for col in ("ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(col, justify="right")
    for host, s in result.hosts.items():
        table.add_row(
            Text(host, style=_STATE_STYLE[s.state] if s.state != "done" else ""),
            _num(s.ok, "green"),
            _num(s.changed, "yellow"),
            _num(s.failed, "red"),
            _num(s.unreachable, "magenta"),
            _num(s.skipped, "cyan"),
        )
    return table


def summary(result: RunResult) -> RenderableType:
    """Closing summary: recap table, each failure with its message, what modules asked to say (a recovered
    interrupted dpkg run), the verdict."""
    parts: list[RenderableType] = []
    if result.hosts:
        parts.append(summary_table(result))
    for t in result.failures:
        msg = t.reason if t.lost else (t.msg or "").strip()
        parts.append(Text(f"{t.host}: {t.label}: {msg}", style=_STATUS_STYLE["unreachable" if t.lost else t.status]))
    if not result.tasks and not result.ok and result.log_tail:
        # Nothing ran: what ansible printed (a syntax error, a missing inventory) is the reason.
        parts.append(Text("\n".join(result.log_tail), style="dim"))
    parts.extend(Text(n.line, style="yellow") for n in result.notices)
    parts.append(Text(result.verdict(), style="bold green" if result.ok else "bold red"))
    return Group(*parts)


def print_summary(result: RunResult, console: Console) -> None:
    console.print(summary(result))
