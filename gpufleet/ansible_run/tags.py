"""Tags of a task, read from its source file.

ansible-runner events name a task's file and line (``task_path: /x/main.yml:12``) but not its tags,
so the tags are read back from the YAML at that line: the task's own ``tags`` plus those of the
blocks and play around it in the same file. Tags a role or an ``include_*`` adds from another file
are not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml


def _tag_list(node: yaml.Node) -> list[str]:
    if isinstance(node, yaml.ScalarNode):
        return [t.strip() for t in str(node.value).split(",") if t.strip()]
    if isinstance(node, yaml.SequenceNode):
        return [str(n.value) for n in node.value if isinstance(n, yaml.ScalarNode)]
    return []


def tags_by_line(text: str) -> dict[int, list[str]]:
    """1-based line of each mapping in a YAML document -> its tags, inherited ones first."""
    out: dict[int, list[str]] = {}

    def walk(node: yaml.Node, inherited: list[str]) -> None:
        if isinstance(node, yaml.MappingNode):
            own: list[str] = []
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == "tags":
                    own = _tag_list(value)
            tags = inherited + [t for t in own if t not in inherited]
            out.setdefault(node.start_mark.line + 1, tags)
            for _, value in node.value:
                walk(value, tags)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, inherited)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, [])
    return out


class TaskTags:
    """``task_path`` -> tags, caching each file; unreadable files give no tags.

    ``replace`` rewrites path prefixes first (recorded events name the folder they were recorded in).
    """

    def __init__(self, replace: Mapping[str, str] | None = None) -> None:
        self._replace = dict(replace or {})
        self._files: dict[str, dict[int, list[str]]] = {}

    def __call__(self, task_path: str) -> list[str]:
        path, _, line = task_path.rpartition(":")
        if not path or not line.isdigit():
            return []
        for old, new in self._replace.items():
            path = path.replace(old, new)
        if path not in self._files:
            try:
                self._files[path] = tags_by_line(Path(path).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                self._files[path] = {}
        return list(self._files[path].get(int(line), []))
