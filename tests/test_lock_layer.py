"""The generated defaults layer is what the lock renders, and NVIDIA's naming lives only in gpufleet.lock.

roles/gpufleet_defaults/defaults/main.yml is the YAML consumers' copy of the lock (versions of the default profile,
the naming table, the compatibility tables); this fails when it was edited by hand or the lock changed without
regenerating it. The grep below keeps package names and driver versions out of everything else.
"""

from __future__ import annotations

import ast
import re
import subprocess

import yaml

from gpufleet import REPO_ROOT
from gpufleet.lock import PROFILES
from gpufleet.lock.layer import LAYER_FILE, default_lock, layer_text, render_layer
from gpufleet.lock.packages import driver_names, fabric_manager_names, host_packages, lustre_client_packages


def test_committed_layer_is_current() -> None:
    assert LAYER_FILE.read_text() == layer_text(), (
        f"{LAYER_FILE.relative_to(REPO_ROOT)} is not what gpufleet.lock renders. "
        "Fix: .venv/bin/python -m gpufleet.lock.layer (never edit the file by hand)")


def test_layer_names_every_profile_s_packages() -> None:
    table = yaml.safe_load(LAYER_FILE.read_text())["gpufleet_packages"]
    for name, p in PROFILES.items():
        branch = str(int(p.driver.split(".")[0]))
        assert table["driver"][branch][p.kernel_module] == driver_names(int(branch), p.kernel_module), name
        assert table["fabric_manager"][branch] == fabric_manager_names(int(branch)), name
        assert ".".join(p.cuda.split(".")[:2]) in table["cuda_toolkit"], name


def test_layer_leaves_what_follows_the_driver_to_the_roles() -> None:
    layer = render_layer()
    # A constant here would pin fabric manager, NSCQ and the branch to the default profile's driver in a scenario
    # that sets only nvidia_driver_version; the NVSwitch requirement undefined means "detect".
    for key in ("nvidia_driver_branch", "nvidia_fabricmanager_version", "nvidia_nscq_version",
                "nvidia_fabricmanager_required"):
        assert key not in layer
    assert layer["nvidia_driver_version"] == default_lock().driver


# --- one place for names and driver versions ---------------------------------------------------------------

#: Where NVIDIA package names and driver version strings may appear besides: the lock's code and data
#: (gpufleet/lock/), the generated layer, the test doubles and the fixture repository's data (testbed/), tests,
#: Molecule scenarios (the versions they converge to and the state they assert), the GPU catalog's quoted sources,
#: and user input (stacks/). Everything else, the roles, playbooks, modules and the product code, gets them from
#: gpufleet.lock (Python) or the generated layer (YAML).
ALLOWED = (
    "gpufleet/lock/",
    "roles/gpufleet_defaults/defaults/main.yml",
    "testbed/",
    "tests/",
    "molecule/",
    "gpufleet/catalog/gpus.yaml",
    "stacks/",
)
SCANNED = ("roles/", "ansible/", "gpufleet/", "molecule/shared/")
#: NVIDIA's CUDA-repository package names (with an optional branch or flavour), Whamcloud's Lustre client's, and driver
#: versions (3-digit branch,
#: minor, optional patch: the lock's FORMATS["driver"]). A unit name (nvidia-fabricmanager.service) is not a package,
#: nor a directory of a URL (Google's .../nvidia-driver-installer/cos/... manifest in gpufleet/catalog/clouds.yaml).
NAMES = re.compile(
    r"(?<![\w/-])(nvidia-(driver|dkms|kernel-source|kernel-common|utils|compute-utils|fabricmanager)"
    r"|libnvidia-(compute|cfg1|common|nscq|container)|cuda-toolkit-\d+-\d+|cuda-drivers|libcudnn\d|libnccl(2|-dev)"
    r"|datacenter-gpu-manager|nvidia-container-toolkit|lustre-client-(utils|modules))(?!\.[a-z])")
DRIVER = re.compile(r"(?<![\w.])(5[2-9]\d|6\d\d)\.\d{2,3}(\.\d{2})?(?![\w.])")
#: YAML keys whose values are prose (task names, messages, documentation), unit names, or file names.
PROSE_KEYS = {"name", "description", "short_description", "fail_msg", "success_msg", "msg"}
UNIT_MODULES = {"ansible.builtin.systemd_service", "ansible.builtin.systemd", "ansible.builtin.service"}
#: Python module-level documentation strings of Ansible modules.
DOC_ASSIGNMENTS = {"DOCUMENTATION", "EXAMPLES", "RETURN"}


def _hits(text: str) -> list[str]:
    return [m.group(0) for m in (*NAMES.finditer(text), *DRIVER.finditer(text))]


def _yaml_strings(node: object, key: str = "", parent: dict[str, object] | None = None) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _yaml_strings(v, str(k), node)]
    if isinstance(node, list):
        return [s for v in node for s in _yaml_strings(v, key, parent)]
    if not isinstance(node, str) or (key in PROSE_KEYS and (" " in node or key != "name")):
        return []
    if key == "name" and parent is not None and parent.get("__module__") in UNIT_MODULES:
        return []
    if key.endswith("_unit") or key == "pinned_packages_component":  # a unit, a preferences file's name
        return []
    return [node]


def _mark_modules(node: object) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in UNIT_MODULES and isinstance(v, dict):
                v["__module__"] = k
            _mark_modules(v)
    elif isinstance(node, list):
        for v in node:
            _mark_modules(v)


def _python_strings(source: str) -> list[str]:
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))  # docstring
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id in DOC_ASSIGNMENTS for t in targets):
            skip.add(id(node.value))
    # Strings with whitespace are messages and prose; a name in code is a bare token (or an f-string piece).
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in skip and not re.search(r"\s", n.value)]


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [p for p in out.splitlines() if (REPO_ROOT / p).is_file()]


def test_no_package_name_or_driver_version_outside_the_lock() -> None:
    found = []
    for rel in _tracked():
        if not rel.startswith(SCANNED) or rel.startswith(ALLOWED):
            continue
        text = (REPO_ROOT / rel).read_text(errors="replace")
        if rel.endswith((".yml", ".yaml")):
            docs = list(yaml.safe_load_all(text))
            _mark_modules(docs)
            strings = _yaml_strings(docs)
        elif rel.endswith(".py"):
            strings = _python_strings(text)
        elif rel.endswith(".j2"):
            strings = [ln for ln in text.splitlines() if not ln.lstrip().startswith(("#", "//"))]
        else:
            continue
        found += [f"{rel}: {hit}" for s in strings for hit in _hits(s)]
    assert not found, ("NVIDIA package names / driver versions outside gpufleet.lock (take them from gpufleet.lock "
                       "or the generated layer roles/gpufleet_defaults):\n" + "\n".join(sorted(set(found))))


def test_the_grep_sees_a_copy() -> None:
    # Every name and version the lock produces matches, so a copy of any of them would be caught.
    for name, _ in host_packages(default_lock(), nvswitch=True) + lustre_client_packages(default_lock()):
        assert NAMES.search(name), name
    assert DRIVER.search(default_lock().driver)
    assert _python_strings('X = "libnccl2"\nY = f"nvidia-utils-{b}"\n') == ["libnccl2", "nvidia-utils-"]
    assert _hits(" ".join(_yaml_strings(yaml.safe_load("- name: Install it\n  ansible.builtin.apt:\n"
                                                      "    name: [libcudnn9-cuda-12]\n")))) == ["libcudnn9"]
