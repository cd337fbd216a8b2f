"""Output folders (``--report``, ``--out``): gpufleet never deletes or overwrites a file it did not write.

A folder given for output must be new, empty, or one gpufleet wrote before: such a folder holds
:data:`MANIFEST`, the relative paths of the files gpufleet wrote into it. Only those may be replaced or
removed on a later run; any other file in it (the user's notes, a bundle copied in by hand) stays as it is,
and a non-empty folder without the manifest is refused before anything runs. A regular file where the folder
should be is the contract's error, not a traceback.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from gpufleet.errors import InputError
from gpufleet.inputs import read_text

#: The list of files gpufleet wrote into an output folder, one relative path a line.
MANIFEST = ".gpufleet-files"

_FIX = "pass a new or empty folder (gpufleet never deletes or overwrites files it did not write)"


def _safe(rel: str) -> bool:
    p = PurePosixPath(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts and rel != MANIFEST


@dataclass
class OutputDir:
    """A folder gpufleet may write into; :meth:`target` is the one way to get a path in it."""

    path: Path
    option: str
    written: set[str] = field(default_factory=set)

    def _error(self, rel: str, message: str, fix: str = _FIX) -> InputError:
        return InputError.one(str(self.path / rel), message, fix, key=self.option, kind="output folder problem")

    def _save(self) -> None:
        tmp = self.path / (MANIFEST + ".tmp")
        tmp.write_text("".join(f"{r}\n" for r in sorted(self.written)), encoding="utf-8")
        os.replace(tmp, self.path / MANIFEST)

    def target(self, rel: str) -> Path:
        """The path of ``rel`` in the folder, recorded as written by gpufleet; refused when a file of that
        name is there and gpufleet did not write it."""
        if not _safe(rel):
            raise self._error(rel, "not a path inside the output folder", "this is a bug in gpufleet")
        path = self.path / rel
        if (path.exists() or path.is_symlink()) and rel not in self.written:
            raise self._error(rel, "exists and was not written by gpufleet; refusing to overwrite it",
                              "move the file away, or pass a new or empty folder")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise self._error(rel, f"cannot create its folder: {e.strerror or e}", _FIX) from None
        if rel not in self.written:
            self.written.add(rel)
            self._save()
        return path

    def write_text(self, rel: str, text: str) -> Path:
        path = self.target(rel)
        path.write_text(text, encoding="utf-8")
        return path

    def write_bytes(self, rel: str, data: bytes) -> Path:
        path = self.target(rel)
        path.write_bytes(data)
        return path

    def remove_written(self, pattern: str, keep: set[str] | None = None) -> None:
        """Remove the files matching ``pattern`` that gpufleet wrote here earlier (and only those)."""
        for rel in sorted(self.written):
            if fnmatch.fnmatchcase(rel, pattern) and rel not in (keep or set()):
                (self.path / rel).unlink(missing_ok=True)
                self.written.discard(rel)
        self._save()


def claim(path: Path, option: str) -> OutputDir:
    """``path`` as an output folder: created when missing; an existing one must be empty or written by gpufleet."""
    def error(message: str, fix: str = _FIX) -> InputError:
        return InputError.one(str(path), message, fix, key=option, kind="output folder problem")

    if path.exists() and not path.is_dir():
        raise error("is a file, not a folder", f"pass a folder for {option} (it is created when missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        entries = [e.name for e in path.iterdir()]
    except OSError as e:
        raise error(f"cannot create or list the folder: {e.strerror or e}",
                    "pass a folder you can write to") from None
    manifest = path / MANIFEST
    if not entries:
        return OutputDir(path, option)
    if not manifest.is_file():
        raise error(f"is not empty ({len(entries)} entries) and gpufleet did not write it")
    written = {line.strip() for line in read_text(manifest, "yaml").splitlines() if _safe(line.strip())}
    return OutputDir(path, option, written)
