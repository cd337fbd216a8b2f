#!/usr/bin/python
"""Ansible module: move aside every other apt source of a repository the role manages (issue 28 point 4)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source_adopt
short_description: Move aside the other apt sources of one repository, keeping them as copies
description:
  - Finds every apt source that points at O(uri) other than O(keep) - one-line C(*.list) and deb822 C(*.sources) files
    of O(sources_dir), any name and any options (C(signed-by), C(trusted)) - and renames each to
    C(<file>.gpufleet-replaced). apt reads only the C(.list) and C(.sources) files of sources.list.d and ignores the
    others (sources.list(5), SOURCES.LIST.D), so the copy is kept and out of apt's way; nothing is deleted.
  - A second source of one repository with another C(signed-by) (what NVIDIA's cuda-keyring package sets up) or
    C(trusted=yes) makes apt stop with "Conflicting values set for option Signed-By/Trusted"; the nvidia_repo role is
    to run this before its own source and the index refresh (issue 28 point 4; wiring in commit 7eddd78, reverted
    until its Molecule scenario passes).
  - In O(sources_list) (the main file, which also holds the distribution's own archive) only the matching lines are
    commented out, after a copy of the file is kept as C(<file>.gpufleet-replaced).
  - A copy that already exists is never overwritten, the next free C(.gpufleet-replaced.N) name is taken.
  - Supports check mode (reports what would move, moves nothing).
options:
  uri:
    description: The repository URI the role manages (compared without a trailing slash).
    type: str
    required: true
  keep:
    description: The role's own source file, left alone.
    type: path
    required: true
  sources_dir:
    description: The sources.list.d directory.
    type: path
    default: /etc/apt/sources.list.d
  sources_list:
    description: The main sources.list file.
    type: path
    default: /etc/apt/sources.list
author: gpufleet
"""

EXAMPLES = r"""
- name: Move aside other sources of the CUDA repository
  apt_source_adopt:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64
    keep: /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list
"""

RETURN = r"""
replaced:
  description: Each file moved aside (or whose matching lines were commented out), with where its copy is.
  type: list
  elements: dict
  returned: always
  sample: [{path: /etc/apt/sources.list.d/cuda-keyring.list,
            copy: /etc/apt/sources.list.d/cuda-keyring.list.gpufleet-replaced}]
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule

SUFFIX = ".gpufleet-replaced"


def _norm(uri: str) -> str:
    return uri.strip().rstrip("/")


def one_line_matches(line: str, uri: str) -> bool:
    """A one-line source entry (`deb [options] uri suite [components]`) for uri; comments and blanks never match."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return False
    words = text.split()
    if words[0] not in ("deb", "deb-src"):
        return False
    rest = text[len(words[0]):].strip()
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            return False
        rest = rest[end + 1:].strip()
    parts = rest.split()
    return bool(parts) and _norm(parts[0]) == _norm(uri)


def deb822_matches(text: str, uri: str) -> bool:
    """Some stanza of a deb822 sources file lists uri among its URIs (fields are case-insensitive)."""
    target = _norm(uri)
    field = ""
    uris: list[str] = []
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if raw[:1] in (" ", "\t"):
            if field == "uris":
                uris.extend(raw.split())
            continue
        name, sep, value = raw.partition(":")
        field = name.strip().lower() if sep else ""
        if field == "uris":
            uris.extend(value.split())
    return target in (_norm(u) for u in uris)


def free_copy(path: str) -> str:
    copy = path + SUFFIX
    n = 1
    while os.path.lexists(copy):
        copy = f"{path}{SUFFIX}.{n}"
        n += 1
    return copy


def plan(uri: str, keep: str, sources_dir: str, sources_list: str) -> list[dict[str, str]]:
    """The files to move aside (kind move) and the main file to edit (kind edit), in a stable order."""
    found: list[dict[str, str]] = []
    if os.path.isfile(sources_list):
        with open(sources_list, encoding="utf-8", errors="replace") as f:
            if any(one_line_matches(ln, uri) for ln in f):
                found.append({"path": sources_list, "kind": "edit"})
    if os.path.isdir(sources_dir):
        for name in sorted(os.listdir(sources_dir)):
            path = os.path.join(sources_dir, name)
            if os.path.realpath(path) == os.path.realpath(keep) or not os.path.isfile(path):
                continue
            if not name.endswith((".list", ".sources")):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            hit = (deb822_matches(text, uri) if name.endswith(".sources")
                   else any(one_line_matches(ln, uri) for ln in text.splitlines()))
            if hit:
                found.append({"path": path, "kind": "move"})
    return found


def apply(entry: dict[str, str], uri: str) -> str:
    """Move or edit one file; returns where its copy is."""
    path = entry["path"]
    copy = free_copy(path)
    if entry["kind"] == "move":
        os.rename(path, copy)
        return copy
    shutil.copy2(path, copy)
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines(keepends=True)
    out = [f"# {ln}" if one_line_matches(ln, uri) else ln for ln in lines]
    tmp = path + ".gpufleet-tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("".join(out))
    shutil.copystat(copy, tmp)
    os.replace(tmp, path)
    return copy


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "uri": {"type": "str", "required": True},
            "keep": {"type": "path", "required": True},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
        },
        supports_check_mode=True,
    )
    p = module.params
    uri: str = p["uri"]
    found = plan(uri, p["keep"], p["sources_dir"], p["sources_list"])
    replaced: list[dict[str, str]] = []
    for entry in found:
        try:
            copy = free_copy(entry["path"]) if module.check_mode else apply(entry, uri)
        except OSError as e:
            module.fail_json(msg=f"apt_source_adopt: cannot move aside {entry['path']}: {e}. Fix: make the file "
                                 "movable, or remove that source of the repository by hand.", replaced=replaced)
        replaced.append({"path": entry["path"], "copy": copy, "kind": entry["kind"]})
    module.exit_json(changed=bool(replaced), replaced=replaced)


if __name__ == "__main__":
    main()
