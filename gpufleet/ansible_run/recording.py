"""Save playbook event streams as stable JSON lines (test fixtures, bug reports).

Two recordings of the same playbook differ in uuids, timestamps, pids, temp paths and colours;
``scrub_events`` removes or normalises those so a re-recording only shows real changes:
uuids become ``uuid-1``, ``uuid-2`` … in order of first use (links between events survive),
timings and file times become ``"<time>"``, inode/device numbers ``"<machine>"``, given path
prefixes become placeholders, and task stdout and echoed module arguments (``invocation``) are
dropped. Event order across hosts still varies between recordings (ansible runs hosts in parallel).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_DROP_TOP = frozenset({"stdout", "start_line", "end_line", "runner_ident", "pid", "created"})
_LOG_EVENTS = frozenset({"verbose", "error", "warning", "deprecated", "system_warning"})
_TIMING_KEYS = frozenset({"start", "end", "delta", "duration", "created", "atime", "mtime", "ctime"})
#: stat results name the inode and device, which differ on every recording machine and run.
_MACHINE_KEYS = frozenset({"inode", "dev"})
_DROP_KEYS = frozenset({"invocation"})
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
#: ansible's per-task temp dir names carry a timestamp and pid.
_ANSIBLE_TMP = re.compile(r"ansible-tmp-[0-9.]+-[0-9]+-[0-9]+")
#: _original_basename of copy/template is a random temp file name.
_RANDOM_KEYS = frozenset({"_original_basename"})


class _Scrubber:
    def __init__(self, replace: Mapping[str, str]) -> None:
        # Longest first, so a temp dir inside another placeholder's folder is replaced whole.
        self._replace = sorted(replace.items(), key=lambda kv: -len(kv[0]))
        self._uuids: dict[str, str] = {}

    def uuid(self, value: Any) -> Any:
        if not isinstance(value, str) or not value:
            return value
        return self._uuids.setdefault(value, f"uuid-{len(self._uuids) + 1}")

    def text(self, value: str) -> str:
        for old, new in self._replace:
            value = value.replace(old, new)
        return _ANSIBLE_TMP.sub("ansible-tmp-X", value)

    def value(self, value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.value(v, str(k)) for k, v in value.items() if k not in _DROP_KEYS}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if key in _TIMING_KEYS and value is not None:
            return "<time>"
        if key in _RANDOM_KEYS and value is not None:
            return "<random>"
        if key in _MACHINE_KEYS and value is not None:
            return "<machine>"
        if key == "uuid" or key.endswith("_uuid"):
            return self.uuid(value)
        if isinstance(value, str):
            return self.text(value)
        return value

    def event(self, event: Mapping[str, Any]) -> dict[str, Any]:
        name = event.get("event")
        out: dict[str, Any] = {}
        for k, v in event.items():
            if k == "stdout" and name in _LOG_EVENTS:
                out[k] = self.text(_ANSI.sub("", str(v)))
            elif k not in _DROP_TOP:
                out[k] = self.value(v, k)
        return out


def scrub_events(events: Iterable[Mapping[str, Any]], replace: Mapping[str, str]) -> list[dict[str, Any]]:
    """Stable copies of ``events``; ``replace`` maps volatile path prefixes to placeholders."""
    scrubber = _Scrubber(replace)
    return [scrubber.event(e) for e in events]


def write_events(path: Path, events: Iterable[Mapping[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e, sort_keys=True, default=str) + "\n")


def read_events(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
