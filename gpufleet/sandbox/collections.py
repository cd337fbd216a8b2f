"""Ansible collections, extracted offline from the ``ansible`` PyPI wheel that matches ansible-core.

Galaxy is not reachable; the ``ansible`` community package ships every collection we need. Only the ones listed
in ``ansible/requirements.yml`` are extracted, into ``.collections/ansible_collections/``.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import yaml

from gpufleet import REPO_ROOT

#: The community package release built on ansible-core 2.19 (its METADATA: ansible-core~=2.19.5).
ANSIBLE_PACKAGE = "ansible==12.3.0"
REQUIREMENTS = REPO_ROOT / "ansible" / "requirements.yml"
DEST = REPO_ROOT / ".collections"
WHEEL_DIR = REPO_ROOT / ".cache" / "wheels"


def required() -> dict[str, str]:
    data = yaml.safe_load(REQUIREMENTS.read_text())
    return {c["name"]: str(c["version"]) for c in data["collections"]}


def _installed_version(name: str) -> str | None:
    ns, coll = name.split(".")
    manifest = DEST / "ansible_collections" / ns / coll / "MANIFEST.json"
    if not manifest.exists():
        return None
    import json

    return str(json.loads(manifest.read_text())["collection_info"]["version"])


def ensure_collections(log: bool = True) -> Path:
    wanted = required()
    if all(_installed_version(n) == v for n, v in wanted.items()):
        return DEST
    WHEEL_DIR.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEEL_DIR.glob("ansible-12.3.0-*.whl"))
    if not wheels:
        if log:
            print(f"downloading {ANSIBLE_PACKAGE} wheel (collections only)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(WHEEL_DIR),
                        ANSIBLE_PACKAGE], check=True)
        wheels = sorted(WHEEL_DIR.glob("ansible-12.3.0-*.whl"))
    with zipfile.ZipFile(wheels[0]) as zf:
        for name in wanted:
            ns, coll = name.split(".")
            prefix = f"ansible_collections/{ns}/{coll}/"
            for member in zf.namelist():
                if member.startswith(prefix):
                    zf.extract(member, DEST)
    for name, version in wanted.items():
        got = _installed_version(name)
        if got != version:
            raise RuntimeError(f"{name}: ansible/requirements.yml wants {version}, {ANSIBLE_PACKAGE} ships {got}")
    return DEST


if __name__ == "__main__":
    print(ensure_collections())
