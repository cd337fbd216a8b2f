#!/usr/bin/python
"""Ansible module: replace every other apt source of the repository a role manages, keeping each as a copy."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_source_adopt
short_description: Move aside the other apt sources of one repository, keeping them as copies
description:
  - Finds every apt source that points at O(uri) - one-line C(*.list) and deb822 C(*.sources) files of O(sources_dir),
    any name and any options (C(signed-by), C(trusted)) - other than the role's own O(keep), and renames each to
    C(<file>.gpufleet-replaced). apt reads only the C(.list) and C(.sources) files of sources.list.d (sources.list(5)),
    so the copy is kept and out of apt's way (apt-get prints a C(N:) notice that it ignores it); nothing is deleted.
  - A second source of one repository with another C(signed-by) (what NVIDIA's cuda-keyring package sets up) or
    with C(trusted=yes) makes apt stop with "Conflicting values set for option Signed-By/Trusted"; the nvidia_repo
    role runs this before it writes its own source and refreshes the index (issue 28 point 4).
  - O(keep) itself is another installer's file when it points at O(uri) without the O(keep_marker) line (NVIDIA's
    cuda-keyring package writes the very name C(cuda-<distro>-<arch>.list) the role uses) - it is moved aside too, and
    the role's own source is written in its place.
  - In O(sources_list) (the main file, which also holds the distribution's own archive) only the matching lines are
    commented out, after a copy of the whole file is kept as C(<file>.gpufleet-replaced).
  - A copy that already exists is never overwritten; the next free C(.gpufleet-replaced.N) name is taken.
  - The sources are read with the project's one source grammar (gpufleet/module_utils/apt_sources.py, shipped as
    C(ansible.module_utils.gpufleet_apt_sources)).
  - Supports check mode (reports what would move and where its copy would be; moves nothing).
options:
  uri:
    description: The repository URI the role manages (compared without a trailing slash, as apt does).
    type: str
    required: true
  keep:
    description: The role's own source file, left alone while it holds O(keep_marker).
    type: path
    required: true
  keep_marker:
    description:
      - A line the role writes at the top of its own source. O(keep) without it is another installer's file. Empty
        means O(keep) is always the role's.
    type: str
    default: ""
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
- name: Replace the other sources of the CUDA repository
  apt_source_adopt:
    uri: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64
    keep: /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list
    keep_marker: "# Managed by gpufleet (role nvidia_repo)"
"""

RETURN = r"""
replaced:
  description:
    - Each file moved aside (kind C(move)) or whose matching lines were commented out (kind C(edit)), with where its
      copy is (check mode - where it would be), O(uri), and the options of its entries for it (C(signed-by),
      C(trusted)...), which C(gpufleet drift) rates (a C(trusted=yes) copy is a security finding).
  type: list
  elements: dict
  returned: always
  sample: [{path: /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.sources, kind: move,
            copy: /etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.sources.gpufleet-replaced,
            uri: "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64",
            options: {signed-by: /usr/share/keyrings/cuda-archive-keyring.gpg}}]
gpufleet_notice:
  description:
    - The line for the run's summary (gpufleet/ansible_run/results.py), set when something was (check mode - would
      be) replaced. C(event) is C(replaced apt sources) or C(would replace apt sources), C(detail) names each file
      and its copy.
  type: dict
  returned: when changed
  sample: {event: replaced apt sources, detail: "/etc/apt/sources.list.d/cuda.sources (kept as
           /etc/apt/sources.list.d/cuda.sources.gpufleet-replaced)"}
"""

import os
import shutil
from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_apt_sources import entries_for

SUFFIX = ".gpufleet-replaced"


def free_copy(path: str) -> str:
    """``path.gpufleet-replaced``, or the first ``.N`` after it that does not exist yet."""
    copy = path + SUFFIX
    n = 1
    while os.path.lexists(copy):
        copy = f"{path}{SUFFIX}.{n}"
        n += 1
    return copy


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def options_of(text: str, uri: str) -> dict[str, str]:
    """The options of the file's entries for uri, one value each; an option that turns signature checks off
    (trusted=yes…) wins over the same option unset, for `gpufleet drift` to rate it (security)."""
    merged: dict[str, str] = {}
    for s in entries_for(text, uri):
        for key, value in s.options.items():
            if key not in merged or value.lower() in ("yes", "true", "1"):
                merged[key] = value
    return merged


def plan(uri: str, keep: str, keep_marker: str, sources_dir: str, sources_list: str) -> list[dict[str, Any]]:
    """The files to move aside (kind move) and the main file to edit (kind edit), in a stable order, each with
    the URI and options of its entries for uri."""
    found: list[dict[str, Any]] = []
    if os.path.isfile(sources_list) and entries_for(_read(sources_list), uri):
        found.append({"path": sources_list, "kind": "edit", "options": options_of(_read(sources_list), uri)})
    if not os.path.isdir(sources_dir):
        return found
    for name in sorted(os.listdir(sources_dir)):
        path = os.path.join(sources_dir, name)
        if not name.endswith((".list", ".sources")) or not os.path.isfile(path):
            continue
        text = _read(path)
        if os.path.realpath(path) == os.path.realpath(keep) and (not keep_marker or keep_marker in text.splitlines()):
            continue
        if entries_for(text, uri):
            found.append({"path": path, "kind": "move", "options": options_of(text, uri)})
    return found


def apply(entry: dict[str, Any], uri: str) -> str:
    """Move or edit one file; returns where its copy is."""
    path = entry["path"]
    copy = free_copy(path)
    if entry["kind"] == "move":
        os.rename(path, copy)
        return copy
    shutil.copy2(path, copy)
    lines = _read(path).splitlines(keepends=True)
    out = [f"# {ln}" if entries_for(ln, uri) else ln for ln in lines]
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
            "keep_marker": {"type": "str", "default": ""},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
        },
        supports_check_mode=True,
    )
    p = module.params
    uri: str = p["uri"]
    found = plan(uri, p["keep"], p["keep_marker"], p["sources_dir"], p["sources_list"])
    replaced: list[dict[str, Any]] = []
    for entry in found:
        try:
            copy = free_copy(entry["path"]) if module.check_mode else apply(entry, uri)
        except OSError as e:
            module.fail_json(msg=f"apt_source_adopt: cannot move aside {entry['path']}: {e}. Fix: make the file "
                                 "movable, or remove that source of the repository by hand.", replaced=replaced)
        replaced.append({"path": entry["path"], "copy": copy, "kind": entry["kind"], "uri": uri,
                         "options": entry["options"]})
    result: dict[str, object] = {"changed": bool(replaced), "replaced": replaced}
    if replaced:
        result["gpufleet_notice"] = {
            "event": "would replace apt sources" if module.check_mode else "replaced apt sources",
            "detail": "; ".join(f"{r['path']} (kept as {r['copy']})" for r in replaced),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
