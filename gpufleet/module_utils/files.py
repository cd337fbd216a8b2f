"""Small configuration files on a managed host: read one, write one atomically, create missing parents.

Used by the ``managed_files`` and ``sysctl_settings`` modules (ansible/library), which ship it to the hosts as
``ansible.module_utils.gpufleet_files``. Standard library only.
"""

from __future__ import annotations

import os
import tempfile


def inspect(path: str) -> tuple[bytes | None, os.stat_result | None]:
    """The file's bytes and stat, or ``(None, None)`` when it does not exist."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None, None
    with open(path, "rb") as fh:
        return fh.read(), st


def make_parents(path: str) -> None:
    """Create the missing directories above ``path`` (root's umask aside: 0755)."""
    parent = os.path.dirname(path)
    missing = []
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    for d in reversed(missing):
        os.mkdir(d, 0o755)
        os.chmod(d, 0o755)


def write(path: str, data: bytes, mode: int, uid: int, gid: int) -> None:
    """Replace ``path`` with ``data`` atomically (a temp file in the same directory, then rename)."""
    make_parents(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".gpufleet.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
