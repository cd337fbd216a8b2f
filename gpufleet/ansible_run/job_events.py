"""A finished job's playbook events, read back from where AWX/AAP or ansible-runner left them.

gpufleet's own runs read events live from a pipe (``gpufleet_events``); a job that ran elsewhere leaves the same
events (ansible-runner's ``awx_display`` shape, which gpufleet_events copies) in one of three places, all read here:

* an **ansible-runner artifacts folder** (``<private_data_dir>/artifacts/<ident>/``:
  ``job_events/<counter>-<uuid>.json``, one event a file, plus ``rc`` and ``status``), given as the folder itself,
  its ``job_events/``, or the private data dir when that holds exactly one artifacts folder;
* an **AWX/AAP job's events as the API lists them** (``GET /api/v2/jobs/<id>/job_events/``: a JSON document with
  ``results``, or a list of such pages, or a plain list of events);
* a **JSON-lines file** (``gpufleet drift --record``, one event a line).

Events are ordered by ``counter`` where they carry one (runner's files are named by it; AWX pages list them by id).
The job's outcome comes from runner's ``rc``/``status`` files where they exist, otherwise from the events: a job
whose ``playbook_on_stats`` arrived and counts no failed or unreachable host is ``successful`` with rc 0, one with
failures ``failed`` with rc 2 (ansible-playbook's code), one without stats did not finish.

Every file goes through :mod:`gpufleet.inputs` (size limit, UTF-8); a malformed event is an input error naming the
file, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.errors import InputError
from gpufleet.inputs import read_text

#: ansible-playbook's exit code when a host failed (and when one was unreachable: 4).
RC_FAILED, RC_UNREACHABLE = 2, 4
#: Events one job may carry: a 1,000-node converge emits ~200 task results per host, so 10 per host-task is ample.
MAX_EVENTS = 5_000_000


@dataclass
class JobEvents:
    """The events of one job, in order, and its outcome as ansible-playbook would report it."""

    source: Path
    events: list[dict[str, Any]]
    rc: int
    status: str
    #: Whether the job ran in check mode: known from runner's ``command`` file, None where the events are all there is
    #: (an AWX listing's job says it in its ``job_type``, which the events do not carry).
    check: bool | None = None


def _bad(path: Path, message: str) -> InputError:
    return InputError.one(
        str(path), message,
        "pass an ansible-runner artifacts folder (artifacts/<ident>), an AWX job's job_events JSON, or a JSON-lines "
        "event file (gpufleet drift --record)", key="--events", kind="input error")


def _event(path: Path, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise _bad(path, "not a playbook event (an object with an 'event' name)")
    data = obj.get("event_data", {})
    if not isinstance(data, dict):
        raise _bad(path, f"event {obj['event']!r}: 'event_data' is not an object")
    return obj


def _json(path: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise _bad(path, f"not JSON: {e}") from None


def _artifacts_dir(path: Path) -> Path | None:
    """The artifacts folder ``path`` names (itself, its parent for job_events/, or the private data dir's one)."""
    if path.name == "job_events" and path.is_dir():
        return path.parent
    if (path / "job_events").is_dir():
        return path
    runs = sorted(p for p in (path / "artifacts").glob("*") if (p / "job_events").is_dir()) \
        if (path / "artifacts").is_dir() else []
    if len(runs) > 1:
        raise _bad(path, f"holds {len(runs)} runs ({', '.join(p.name for p in runs)})")
    return runs[0] if runs else None


def _counter(e: Mapping[str, Any]) -> int:
    c = e.get("counter")
    return c if isinstance(c, int) and not isinstance(c, bool) else 0


def _from_artifacts(folder: Path) -> JobEvents:
    files = sorted((folder / "job_events").glob("*.json"))
    if len(files) > MAX_EVENTS:
        raise _bad(folder, f"{len(files)} event files, more than one job can emit ({MAX_EVENTS})")
    events = [_event(f, _json(f, read_text(f, "log"))) for f in files]
    events.sort(key=_counter)
    rc, status = _outcome(events)
    rc_file, status_file = folder / "rc", folder / "status"
    if rc_file.is_file():
        raw = read_text(rc_file, "yaml").strip()
        if not raw.lstrip("-").isdigit() or len(raw) > 4:
            raise _bad(rc_file, f"rc {raw[:20]!r} is not an exit code")
        rc = int(raw)
    if status_file.is_file():
        status = read_text(status_file, "yaml").strip()[:40] or status
    return JobEvents(folder, events, rc, status, _check_mode(folder / "command"))


def _check_mode(path: Path) -> bool | None:
    """``--check`` in runner's ``command`` file (``{"command": [argv...], ...}``); its ``env`` is never read."""
    if not path.is_file():
        return None
    doc = _json(path, read_text(path, "yaml"))
    argv = doc.get("command") if isinstance(doc, dict) else None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise _bad(path, "runner's command file has no command list")
    return any(a in ("--check", "-C") for a in argv)


def _pages(path: Path, doc: Any) -> Iterable[Any]:
    """The events of an AWX listing: one page (``results``), a list of pages, or a list of events."""
    if isinstance(doc, dict) and "results" in doc:
        doc = [doc]
    if not isinstance(doc, list):
        raise _bad(path, "expected an AWX job_events listing (an object with 'results') or a list of events")
    for item in doc:
        if isinstance(item, dict) and "results" in item and "event" not in item:
            if not isinstance(item["results"], list):
                raise _bad(path, "'results' is not a list")
            yield from item["results"]
        else:
            yield item


def _outcome(events: list[dict[str, Any]]) -> tuple[int, str]:
    stats = next((e for e in reversed(events) if e.get("event") == "playbook_on_stats"), None)
    if stats is None:
        return -1, "unfinished"
    data = stats.get("event_data") or {}
    if data.get("dark"):
        return RC_UNREACHABLE, "failed"
    if data.get("failures"):
        return RC_FAILED, "failed"
    return 0, "successful"


def read_job_events(path: Path) -> JobEvents:
    """The events at ``path`` (see the module's docstring for the three layouts)."""
    if not path.exists():
        raise _bad(path, "not found")
    if path.is_dir():
        folder = _artifacts_dir(path)
        if folder is None:
            raise _bad(path, "a folder without job_events/ (nor artifacts/<ident>/job_events/)")
        return _from_artifacts(folder)
    text = read_text(path, "log")
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and '"results"' in stripped[:4096]
                                    and not stripped.startswith('{"event"')):
        events = [_event(path, e) for e in _pages(path, _json(path, text))]
    else:
        events = [_event(path, _json(path, line)) for line in text.splitlines() if line.strip()]
    if len(events) > MAX_EVENTS:
        raise _bad(path, f"{len(events)} events, more than one job can emit ({MAX_EVENTS})")
    if not events:
        raise _bad(path, "holds no events")
    events.sort(key=_counter)
    rc, status = _outcome(events)
    return JobEvents(path, events, rc, status)
