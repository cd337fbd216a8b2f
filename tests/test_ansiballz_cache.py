"""The AnsiballZ payload cache kept between runs (gpufleet_ansiballz_cache callback): its key covers every source a
payload is built from, seeding and storing copy only whole payloads, pruning touches only key directories, and a
changed module never runs from an old payload (a real ansible-playbook run against a cache warmed by the old one)."""

from __future__ import annotations

import base64
import importlib.util
import io
import os
import pickle  # nosec B403: reads the records this test's own run wrote
import re
import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path

from gpufleet import REPO_ROOT
from gpufleet.ansible_run.callback_plugins import gpufleet_ansiballz_cache as cache


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_key_changes_with_any_source_and_nothing_else(tmp_path: Path) -> None:
    lib = _tree(tmp_path / "library", {"mod.py": "A = 1\n", "sub/helper.py": "B = 2\n"})
    key = cache.payload_key(["ansible-core 2.19.14"], [lib])
    assert len(key) == 32 and cache.KEY_RE.fullmatch(key)
    assert cache.payload_key(["ansible-core 2.19.14"], [lib]) == key
    # Bytecode caches are not sources.
    _tree(lib, {"__pycache__/mod.cpython-311.pyc": "x", "other.pyc": "y"})
    assert cache.payload_key(["ansible-core 2.19.14"], [lib]) == key
    assert cache.payload_key(["ansible-core 2.19.15"], [lib]) != key
    (lib / "sub" / "helper.py").write_text("B = 3\n")
    changed = cache.payload_key(["ansible-core 2.19.14"], [lib])
    assert changed != key
    (lib / "sub" / "helper.py").write_text("B = 2\n")
    assert cache.payload_key(["ansible-core 2.19.14"], [lib]) == key
    (lib / "new.py").write_text("")
    assert cache.payload_key(["ansible-core 2.19.14"], [lib]) != key


def test_source_roots_cover_library_module_utils_roles_playbook_and_collections(tmp_path: Path) -> None:
    ansible_dir = _tree(tmp_path / "ansible", {"modules/ping.py": "", "module_utils/basic.py": ""})
    _tree(tmp_path, {
        "lib/x.py": "", "mu/y.py": "",
        "roles/r1/library/m.py": "", "roles/r1/tasks/main.yml": "", "roles/r2/module_utils/u.py": "",
        "pb/library/p.py": "", "pb/collections/ansible_collections/ns/c1/plugins/modules/a.py": "",
        "colls/ansible_collections/ns/c2/plugins/module_utils/b.py": "",
        "colls/ansible_collections/ns/c2/plugins/filter/f.py": "",
    })
    roots = cache.source_roots(
        ansible_dir=ansible_dir, module_paths=[str(tmp_path / "lib"), str(tmp_path / "missing")],
        module_utils_paths=[str(tmp_path / "mu")], roles_paths=[str(tmp_path / "roles")],
        collection_paths=[str(tmp_path / "colls")], playbook_dir=tmp_path / "pb")
    assert {str(r.relative_to(tmp_path)) for r in roots} == {
        "ansible/modules", "ansible/module_utils", "lib", "mu", "roles/r1/library", "roles/r2/module_utils",
        "pb/library", "pb/collections/ansible_collections/ns/c1/plugins/modules",
        "colls/ansible_collections/ns/c2/plugins/module_utils"}


def test_seed_and_store_copy_whole_payloads_only(tmp_path: Path) -> None:
    run1 = _tree(tmp_path / "run1", {"ansible.modules.stat-ZIP_DEFLATED-none": "payload",
                                     "ansible.modules.stat-ZIP_DEFLATED-none.lock": "",
                                     "ansible.modules.apt-ZIP_DEFLATED-none-part": "half"})
    key_dir = tmp_path / "cache" / ("a" * 32)
    assert cache.store(run1, key_dir) == 1
    assert sorted(p.name for p in key_dir.iterdir()) == ["ansible.modules.stat-ZIP_DEFLATED-none"]
    assert cache.store(run1, key_dir) == 0
    run2 = tmp_path / "run2"
    assert cache.seed(key_dir, run2) == 1
    assert (run2 / "ansible.modules.stat-ZIP_DEFLATED-none").read_text() == "payload"
    # An entry the run already has is left as it is.
    (run2 / "ansible.modules.stat-ZIP_DEFLATED-none").write_text("built here")
    assert cache.seed(key_dir, run2) == 0
    assert (run2 / "ansible.modules.stat-ZIP_DEFLATED-none").read_text() == "built here"
    assert cache.seed(tmp_path / "cache" / ("b" * 32), tmp_path / "run3") == 0


def test_prune_removes_only_old_key_directories(tmp_path: Path) -> None:
    keys = [f"{i:032x}" for i in range(6)]
    for age, key in enumerate(keys):
        (tmp_path / key).mkdir()
        os.utime(tmp_path / key, (1_000_000 - age, 1_000_000 - age))
    _tree(tmp_path, {"notakey/file": "kept", "README": "kept"})
    removed = cache.prune(tmp_path, keep=keys[5])
    # keys[5] (oldest, but in use) and the three most recently used others stay.
    assert sorted(p.name for p in removed) == sorted(keys[3:5])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keys[:3], keys[5], "notakey", "README"])


def test_cache_dir_setting(tmp_path: Path) -> None:
    cfg = tmp_path / "ansible" / "ansible.cfg"
    assert cache.resolve_cache_dir("", str(cfg)) is None
    assert cache.resolve_cache_dir("  ", str(cfg)) is None
    assert cache.resolve_cache_dir("../.cache/ansiballz", str(cfg)) == (tmp_path / ".cache" / "ansiballz").resolve()
    assert cache.resolve_cache_dir("/abs/dir", str(cfg)) == Path("/abs/dir")


def test_shipped_config_enables_it() -> None:
    cfg = (REPO_ROOT / "ansible" / "ansible.cfg").read_text()
    assert "callback_plugins = ../gpufleet/ansible_run/callback_plugins" in cfg
    assert "[callback_gpufleet_ansiballz_cache]\n" in cfg and "cache_dir = ../.cache/ansiballz" in cfg


MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpufleet_probe_util import VALUE


def main():
    AnsibleModule(argument_spec={}).exit_json(changed=False, value=VALUE)


if __name__ == "__main__":
    main()
"""


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[str, int, int]:
    """Run the probe playbook; returns the module's value and the payloads the callback seeded and stored."""
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-vvv", "-i", "localhost,", "-c", "local",
         "-e", f"ansible_python_interpreter={sys.executable}", str(tmp_path / "pb.yml")],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    value = re.search(r"probe.value: (\w+)", proc.stdout)
    assert value, proc.stdout
    seeded = re.search(r"gpufleet_ansiballz_cache: key \w+, (\d+) payloads seeded", proc.stdout)
    stored = re.search(r"gpufleet_ansiballz_cache: (\d+) new payloads stored", proc.stdout)
    assert seeded and stored, proc.stdout
    return value[1], int(seeded[1]), int(stored[1])


def _probe(tmp_path: Path) -> dict[str, str]:
    """The probe module (VALUE 'old' from a module_utils file), its playbook, and the environment that runs it
    with the cache at tmp_path/cache."""
    _tree(tmp_path, {"library/gpufleet_probe.py": MODULE, "module_utils/gpufleet_probe_util.py": "VALUE = 'old'\n"})
    (tmp_path / "pb.yml").write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - gpufleet_probe: {}\n      register: probe\n"
        "    - ansible.builtin.debug: {var: probe.value}\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_LIBRARY": str(tmp_path / "library"), "ANSIBLE_MODULE_UTILS": str(tmp_path / "module_utils"),
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_GPUFLEET_ANSIBALLZ_CACHE_DIR": str(tmp_path / "cache")}
    return env


def test_changed_module_utils_never_run_from_a_warm_cache(tmp_path: Path) -> None:
    """Breaking-on-purpose: with the key left out (a fixed one), the second run below would report 'old'."""
    env = _probe(tmp_path)
    # Cold: the probe's payload is built and stored.
    assert _run(tmp_path, env) == ("old", 0, 1)
    # Warm: the same sources run from the stored payload, nothing new to store.
    assert _run(tmp_path, env) == ("old", 1, 0)
    (tmp_path / "module_utils" / "gpufleet_probe_util.py").write_text("VALUE = 'new'\n")
    assert _run(tmp_path, env) == ("new", 0, 1)
    assert len([p for p in (tmp_path / "cache").iterdir() if cache.KEY_RE.fullmatch(p.name)]) == 2


def _zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    return out.getvalue()


def _import_from(zip_data: bytes, tmp_path: Path, drop: str = "", patch: dict[str, bytes] | None = None) -> object:
    """Import ``pkg.mod`` from ``zip_data`` written to a file (as AnsiballZ does), optionally without the member
    ``drop`` or with members replaced; returns the module's VALUE."""
    with zipfile.ZipFile(io.BytesIO(zip_data)) as zin:
        members = {i.filename: zin.read(i) for i in zin.infolist() if i.filename != drop}
    members.update(patch or {})
    path = tmp_path / f"payload{len(list(tmp_path.iterdir()))}.zip"
    path.write_bytes(_zip(members))
    importer = zipimport.zipimporter(str(path))
    namespace: dict[str, object] = {}
    exec(importer.get_code("pkg/mod"), namespace)  # the test's own module
    return namespace["VALUE"]


def test_payload_bytecode_is_what_the_host_imports_and_never_stale(tmp_path: Path) -> None:
    source = {"pkg/__init__.py": b"", "pkg/mod.py": b"VALUE = 'from source'\n", "pkg/py2.py": b"print 'x'\n",
              "pkg/data.txt": b"not python\n"}
    with_pyc = cache.add_bytecode(_zip(source))
    names = zipfile.ZipFile(io.BytesIO(with_pyc)).namelist()
    # A .pyc beside each .py that compiles (Python 2 syntax gets none: the host reports it as before).
    assert sorted(n for n in names if n.endswith(".pyc")) == ["pkg/__init__.pyc", "pkg/mod.pyc"]
    pyc = zipfile.ZipFile(io.BytesIO(with_pyc)).read("pkg/mod.pyc")
    assert pyc[:4] == importlib.util.MAGIC_NUMBER and int.from_bytes(pyc[4:8], "little") == 0b11
    assert cache.add_bytecode(with_pyc) is with_pyc  # already has bytecode: untouched
    # The importer takes the .pyc: with the source gone it still imports.
    assert _import_from(with_pyc, tmp_path, drop="pkg/mod.py") == "from source"
    # Never stale: a changed source beside the .pyc is what runs (its hash no longer matches).
    assert _import_from(with_pyc, tmp_path, patch={"pkg/mod.py": b"VALUE = 'changed'\n"}) == "changed"
    # A host on another Python (another magic number) compiles the source, as without bytecode.
    other = b"\x00\x00" + pyc[2:]
    assert _import_from(with_pyc, tmp_path, patch={"pkg/mod.pyc": other}) == "from source"


def test_a_cache_entry_of_an_unknown_format_is_left_as_it_is(tmp_path: Path) -> None:
    entry = tmp_path / "ansible.modules.x-ZIP_DEFLATED-none"
    entry.write_bytes(b"not a pickle")
    assert not cache.add_bytecode_to_entry(entry)
    assert entry.read_bytes() == b"not a pickle"


def _stored_members(cache_dir: Path) -> list[str]:
    (entry,) = [p for p in cache_dir.glob("*/*") if "gpufleet_probe" in p.name]
    record = pickle.loads(entry.read_bytes())  # ansible-core's record, written by this test's run
    return zipfile.ZipFile(io.BytesIO(base64.b64decode(record.zip_data))).namelist()


def test_stored_payloads_carry_bytecode_and_run(tmp_path: Path) -> None:
    """A real run stores the probe's payload with bytecode (opt-out: bytecode false) and the next run uses it."""
    env = _probe(tmp_path)
    assert _run(tmp_path, env) == ("old", 0, 1)
    members = _stored_members(tmp_path / "cache")
    assert "ansible/module_utils/basic.pyc" in members and "ansible/module_utils/gpufleet_probe_util.pyc" in members
    assert _run(tmp_path, env) == ("old", 1, 0)
    env["ANSIBLE_GPUFLEET_ANSIBALLZ_BYTECODE"] = "false"
    env["ANSIBLE_GPUFLEET_ANSIBALLZ_CACHE_DIR"] = str(tmp_path / "cache-off")
    assert _run(tmp_path, env) == ("old", 0, 1)
    assert not [m for m in _stored_members(tmp_path / "cache-off") if m.endswith(".pyc")]
