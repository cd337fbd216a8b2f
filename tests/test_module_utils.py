"""Code shared with the managed hosts exists once: ansible/ links to gpufleet/module_utils, which needs only stdlib."""

from __future__ import annotations

import ast
import sys

import pytest

from gpufleet import REPO_ROOT

SHARED = REPO_ROOT / "gpufleet" / "module_utils"
#: Ansible path -> the package file it must be (module_utils for modules, the filter for the role preflight).
LINKS = {
    "ansible/module_utils/gpufleet_power_limit.py": "power_limit.py",
    "ansible/module_utils/gpufleet_smi_xml.py": "smi_xml.py",
    "ansible/module_utils/gpufleet_topology.py": "topology.py",
    "ansible/module_utils/gpufleet_local_scratch.py": "local_scratch.py",
    "ansible/module_utils/gpufleet_files.py": "files.py",
    "ansible/module_utils/gpufleet_apt_sources.py": "apt_sources.py",
    "ansible/module_utils/gpufleet_slurm_node.py": "slurm_node.py",
    "ansible/filter_plugins/gpufleet_power_limit.py": "power_limit.py",
    "ansible/filter_plugins/gpufleet_topology.py": "topology.py",
}


@pytest.mark.parametrize(("link", "target"), sorted(LINKS.items()))
def test_ansible_paths_are_links_to_the_package_files(link: str, target: str) -> None:
    path = REPO_ROOT / link
    assert path.is_symlink(), f"{link} must link to gpufleet/module_utils/{target}, not copy it"
    assert path.resolve() == (SHARED / target).resolve()


@pytest.mark.parametrize("path", sorted(p.name for p in SHARED.glob("*.py") if p.name != "__init__.py"))
def test_shared_files_import_only_the_standard_library(path: str) -> None:
    tree = ast.parse((SHARED / path).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative imports do not survive the trip to a host"
            imported.add((node.module or "").split(".")[0])
    outside = sorted(m for m in imported if m not in sys.stdlib_module_names)
    assert outside == [], f"{path} imports {outside}: a module's payload carries only the standard library"


def test_ansible_cfg_names_the_shared_paths() -> None:
    cfg = (REPO_ROOT / "ansible" / "ansible.cfg").read_text()
    assert "module_utils = ./module_utils" in cfg and "filter_plugins = ./filter_plugins" in cfg
    base = (REPO_ROOT / "molecule" / "shared" / "base.yml").read_text()
    assert "ANSIBLE_MODULE_UTILS: ${MOLECULE_PROJECT_DIRECTORY}/ansible/module_utils" in base
    assert "ANSIBLE_FILTER_PLUGINS: ${MOLECULE_PROJECT_DIRECTORY}/ansible/filter_plugins" in base


def test_no_second_xml_parser() -> None:
    # The simulator writes that XML; it does not read it.
    holders = {str(p.relative_to(REPO_ROOT)) for p in [*REPO_ROOT.glob("gpufleet/**/*.py"),
                                                       *REPO_ROOT.glob("ansible/**/*.py")]
               if not p.is_symlink() and "gpu_power_readings" in p.read_text()
               and not p.is_relative_to(REPO_ROOT / "gpufleet" / "simulator")}
    assert holders == {"gpufleet/module_utils/smi_xml.py"}
