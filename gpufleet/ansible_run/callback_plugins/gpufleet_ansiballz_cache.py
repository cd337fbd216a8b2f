"""gpufleet_ansiballz_cache: AnsiballZ payloads built in one run are reused by the next.

Before a Python module runs on a host, ansible builds its payload (the module and every ``module_utils`` it
imports, zipped): ``recursive_finder`` parses each of those files to find their imports, which was 40% of the
controller's worker time in a no-op converge (docs/performance.md). ansible-core keeps the built payloads in
``<local tmp>/ansiballz_cache``, one per module, but that directory belongs to one ``ansible-playbook`` process
and is deleted when it exits, so every run builds every payload again.

This callback keeps them: when the playbook starts it copies the entries of a persistent cache directory into
ansible's per-run cache directory (ansible then finds them as if built earlier in the same run), and when the
playbook ends it copies the entries built in this run back. The persistent entries live under a key, a digest
of everything a payload is made of: the ansible-core version, the Python version, and the content of every
module and module_utils file ansible could put into one (ansible-core's own, the configured library and
module_utils paths, the roles' and the playbook's ``library``/``module_utils``, the installed collections'
``plugins/modules`` and ``plugins/module_utils``). A changed module or module_utils file gives a new key, so
a payload is never reused after its sources changed; the least recently used keys beyond KEEP_KEYS are pruned.

Enabled by ``cache_dir`` (ansible/ansible.cfg: ``[callback_gpufleet_ansiballz_cache] cache_dir``, relative to
the ansible.cfg in use, or ``ANSIBLE_GPUFLEET_ANSIBALLZ_CACHE_DIR``); unset or empty, it does nothing (Molecule,
which writes its own ansible.cfg, runs without it). It needs no enabling: ansible loads it from the callback path.

Stored payloads also carry bytecode: next to every ``.py`` in the payload's zip, a ``.pyc`` compiled by the
controller's Python, in the hash-checked form of PEP 552. On the host, ansible imports the payload from its zip
(zipimport), which can never write bytecode, so every module run compiled ``ansible.module_utils.basic`` and the
rest from source: ~90 of the ~230 node CPU ms of a module run in the sandbox (docs/performance.md). zipimport
takes a ``.pyc`` before the ``.py`` when its magic number is the host Python's and its source hash matches the
``.py`` beside it; otherwise (a host on another Python minor version, a changed source) it compiles the source
as before, so a payload with bytecode runs everywhere the one without does. Only hosts whose Python has the
controller's minor version gain (the sandbox, or a controller run with the fleet's Python).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.util
import io
import marshal
import os
import pickle  # nosec B403: ansible-core's own cache format, in our own 0700 directory
import re
import shutil
import sys
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible.release import __version__ as ansible_version
from ansible.utils.collection_loader import AnsibleCollectionConfig

import ansible
from ansible import constants as C  # type: ignore[attr-defined]

DOCUMENTATION = """
name: gpufleet_ansiballz_cache
type: aggregate
short_description: keep AnsiballZ module payloads between runs
description:
  - Seeds ansible's per-run AnsiballZ cache from a persistent directory keyed by a digest of the module
    sources, and stores the payloads built in the run there.
options:
  cache_dir:
    description: Persistent cache directory, relative to the ansible.cfg in use; empty disables the cache.
    type: string
    default: ""
    ini:
      - section: callback_gpufleet_ansiballz_cache
        key: cache_dir
    env:
      - name: ANSIBLE_GPUFLEET_ANSIBALLZ_CACHE_DIR
  bytecode:
    description: Store payloads with the controller Python's bytecode next to their sources.
    type: bool
    default: true
    ini:
      - section: callback_gpufleet_ansiballz_cache
        key: bytecode
    env:
      - name: ANSIBLE_GPUFLEET_ANSIBALLZ_BYTECODE
"""

#: Key directories kept besides the current one (a checkout switching between branches reuses its payloads).
KEEP_KEYS = 3
#: A key directory's name; nothing else in the cache directory is ever removed.
KEY_RE = re.compile(r"[0-9a-f]{32}")
#: What ansible writes next to its entries while building them (locks, partial files): never copied.
_TRANSIENT_SUFFIXES = (".lock", "-part", ".tmp")


def _files(root: Path) -> Iterator[Path]:
    """Every regular file under ``root`` (following links, as ansible does), bytecode caches left out."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                yield Path(dirpath) / name


def payload_key(identity: Iterable[str], roots: Iterable[Path]) -> str:
    """The digest a set of payloads is stored under: the ``identity`` strings (ansible-core and Python
    versions), then each root's path and the relative path and content of every file under it."""
    digest = hashlib.sha256()
    for item in identity:
        digest.update(b"id\0" + item.encode() + b"\0")
    for root in sorted({r.resolve() for r in roots if r.is_dir()}):
        digest.update(b"root\0" + str(root).encode() + b"\0")
        for path in _files(root):
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:32]


def source_roots(
    *,
    ansible_dir: Path,
    module_paths: Iterable[str],
    module_utils_paths: Iterable[str],
    roles_paths: Iterable[str],
    collection_paths: Iterable[str],
    playbook_dir: Path | None,
) -> list[Path]:
    """The directories whose files can go into a payload (those that exist)."""
    roots = [ansible_dir / "modules", ansible_dir / "module_utils"]
    roots += [Path(p) for p in (*module_paths, *module_utils_paths)]
    owners: list[Path] = []
    collections = [Path(p) for p in collection_paths]
    if playbook_dir is not None:
        owners.append(playbook_dir)
        collections.append(playbook_dir / "collections")
    for roles_path in roles_paths:
        if Path(roles_path).is_dir():
            owners += sorted(p for p in Path(roles_path).iterdir() if p.is_dir())
    roots += [d / sub for d in owners for sub in ("library", "module_utils")]
    for base in collections:
        base = base if base.name == "ansible_collections" else base / "ansible_collections"
        for plugins in sorted(base.glob("*/*/plugins")):
            roots += [plugins / "modules", plugins / "module_utils"]
    return [r for r in roots if r.is_dir()]


#: PEP 552 flags of a hash-based .pyc that the importer checks against its source's hash.
PYC_CHECKED_HASH = 0b11


def pyc_bytes(source: bytes, filename: str) -> bytes:
    """A hash-checked .pyc (PEP 552) of ``source`` for this Python: magic, flags, source hash, marshalled code."""
    code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    return (importlib.util.MAGIC_NUMBER + PYC_CHECKED_HASH.to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


def add_bytecode(zip_data: bytes) -> bytes:
    """A payload zip (raw bytes) with a .pyc next to each .py that compiles; one that has bytecode is returned
    as it is. A source that does not compile here keeps no .pyc (the host compiles it, or reports its error)."""
    with zipfile.ZipFile(io.BytesIO(zip_data)) as zin:
        infos = zin.infolist()
        if any(i.filename.endswith(".pyc") for i in infos):
            return zip_data
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as zout:
            for info in infos:
                data = zin.read(info)
                zout.writestr(info, data)
                if not info.filename.endswith(".py"):
                    continue
                try:
                    pyc = pyc_bytes(data, info.filename)
                except (SyntaxError, ValueError):
                    continue
                entry = zipfile.ZipInfo(info.filename + "c", info.date_time)
                entry.compress_type = info.compress_type
                zout.writestr(entry, pyc)
    return out.getvalue()


def _is_record(obj: object) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


def add_bytecode_to_entry(path: Path) -> bool:
    """Rewrite one of ansible's cache entries (a pickled record whose ``zip_data`` is the base64 payload zip)
    with bytecode in its zip. Anything unexpected leaves the entry as it is: returns whether it was rewritten."""
    try:
        with path.open("rb") as f:
            entry: Any = pickle.load(f)  # nosec B301: written by ansible-core into our own cache directory
        zip_b64 = getattr(entry, "zip_data", None)
        if not _is_record(entry) or not isinstance(zip_b64, bytes):
            return False
        zip_data = base64.b64decode(zip_b64, validate=True)
        with_pyc = add_bytecode(zip_data)
        if with_pyc is zip_data:
            return False
        new = dataclasses.replace(entry, zip_data=base64.b64encode(with_pyc))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with tmp.open("wb") as f:
            pickle.dump(new, f)
        os.replace(tmp, path)
    except Exception:  # a format this code does not know: keep ansible's entry untouched
        return False
    return True


def _entries(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and not p.name.startswith(".") and not p.name.endswith(_TRANSIENT_SUFFIXES))


def _copy(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` so that a reader never sees a partial file (another run may read it)."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def seed(key_dir: Path, run_cache: Path) -> int:
    """Copy the stored payloads into ansible's run cache (those it already has are left); returns the count."""
    run_cache.mkdir(parents=True, exist_ok=True)
    count = 0
    for entry in _entries(key_dir):
        target = run_cache / entry.name
        if not target.exists():
            try:
                _copy(entry, target)
            except OSError:
                continue  # pruned by another run meanwhile: ansible builds this one itself
            count += 1
    if key_dir.is_dir():
        os.utime(key_dir)  # the most recently used key is pruned last
    return count


def store(run_cache: Path, key_dir: Path, *, bytecode: bool = True) -> int:
    """Copy the payloads this run built into the persistent key directory, with bytecode added to their zips
    unless ``bytecode`` is false (the next run's hosts import instead of compiling); returns the count."""
    new = [e for e in _entries(run_cache) if not (key_dir / e.name).exists()]
    if new:
        key_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for entry in new:
        tmp = key_dir / f".{entry.name}.{os.getpid()}.new"
        shutil.copyfile(entry, tmp)
        if bytecode:
            add_bytecode_to_entry(tmp)
        os.replace(tmp, key_dir / entry.name)
    return len(new)


def prune(cache_dir: Path, keep: str) -> list[Path]:
    """Remove the key directories other than ``keep`` beyond the KEEP_KEYS most recently used; returns them.
    Only directories named like a key are considered."""
    if not cache_dir.is_dir():
        return []
    others = [p for p in cache_dir.iterdir() if p.is_dir() and KEY_RE.fullmatch(p.name) and p.name != keep]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP_KEYS:]:
        shutil.rmtree(old, ignore_errors=True)
    return others[KEEP_KEYS:]


def resolve_cache_dir(value: str, config_file: str | None) -> Path | None:
    """The configured directory: None when unset or empty, a relative one is relative to the ansible.cfg."""
    if not value.strip():
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        path = (Path(config_file).parent if config_file else Path.cwd()) / path
    return path.resolve()


class CallbackModule(CallbackBase):  # type: ignore[misc]
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpufleet_ansiballz_cache"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self) -> None:
        super().__init__()
        self._key_dir: Path | None = None
        self._run_cache: Path | None = None

    def v2_playbook_on_start(self, playbook: Any) -> None:
        cache_dir = resolve_cache_dir(str(self.get_option("cache_dir") or ""), C.CONFIG_FILE)
        if cache_dir is None:
            return
        basedir = getattr(playbook, "_basedir", None)
        roots = source_roots(
            ansible_dir=Path(ansible.__file__).parent,
            module_paths=C.DEFAULT_MODULE_PATH or [],
            module_utils_paths=C.DEFAULT_MODULE_UTILS_PATH or [],
            roles_paths=C.DEFAULT_ROLES_PATH or [],
            collection_paths=AnsibleCollectionConfig.collection_paths or [],
            playbook_dir=Path(basedir) if basedir else None,
        )
        key = payload_key([f"ansible-core {ansible_version}", f"python {sys.version}"], roots)
        cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._key_dir = cache_dir / key
        # The directory ansible-core's module_common builds its per-run cache in (module_common._find_module_utils).
        self._run_cache = Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"
        seeded = seed(self._key_dir, self._run_cache)
        prune(cache_dir, keep=key)
        self._display.vvv(f"gpufleet_ansiballz_cache: key {key}, {seeded} payloads seeded from {cache_dir}")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if self._key_dir is None or self._run_cache is None:
            return
        stored = store(self._run_cache, self._key_dir, bytecode=bool(self.get_option("bytecode")))
        self._display.vvv(f"gpufleet_ansiballz_cache: {stored} new payloads stored in {self._key_dir}")
