"""Issue 30 point 5 (a): the kubelet_config_dir module (role host_tuning) on a scratch systemd tree. The
registerWithTaints drop-in is read only when the kubelet runs with --config-dir: kubeadm's unit gets a drop-in
that adds it to KUBELET_CONFIG_ARGS, a unit that has it is left alone, no kubelet is no change, any other layout
fails naming the fix. A stand-in ``systemctl cat`` prints the unit files as systemd does (``# /path`` headers)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.test_managed_files_module import RUN_MODULE

MODULE = Path(__file__).resolve().parents[1] / "ansible" / "library" / "kubelet_config_dir.py"
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the module writes the drop-in as root:root")


#: The kubeadm packages' kubelet layout, one copy: molecule host_tuning installs the same files on its kubeadm node.
KUBELET_FIXTURES = Path(__file__).resolve().parents[1] / "molecule" / "host_tuning" / "kubelet"


def kubeadm_dropin(tree: Path) -> str:
    """kubeadm's 10-kubeadm.conf as the kubelet deb ships it (kubernetes/release, cmd/krel/templates/latest/
    kubeadm/10-kubeadm.conf), with its EnvironmentFile= paths inside the scratch tree."""
    text = (KUBELET_FIXTURES / "10-kubeadm.conf").read_text()
    for env_file in ("/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet"):
        assert f"EnvironmentFile=-{env_file}\n" in text
        text = text.replace(f"EnvironmentFile=-{env_file}\n", f"EnvironmentFile=-{tree}{env_file}\n")
    return text


UNIT = "[Unit]\nDescription=kubelet\n[Service]\nExecStart=/usr/bin/kubelet\nRestart=always\n"


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    units = tmp_path / "units.list"  # the unit's files, in systemd's order; our drop-in is listed last
    dropin = tmp_path / "etc/systemd/system/kubelet.service.d/90-gpufleet-config-dir.conf"
    (bin_dir / "systemctl").write_text(
        "#!/bin/sh\n[ \"$1\" = cat ] || exit 2\nfound=\n"
        f"for f in $(cat {shlex.quote(str(units))} 2>/dev/null) {shlex.quote(str(dropin))}; do\n"
        "  [ -f \"$f\" ] || continue; found=1; printf '# %s\\n' \"$f\"; cat \"$f\"; echo\ndone\n"
        "[ -n \"$found\" ] || { echo \"No files found for $2.\" >&2; exit 1; }\n")
    (bin_dir / "systemctl").chmod(0o755)
    return {"root": tmp_path, "bin": bin_dir, "units": units, "dropin": dropin}


def install(tree: dict[str, Path], files: dict[str, str]) -> None:
    paths = []
    for rel, text in files.items():
        p = tree["root"] / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if ".service" in rel:
            paths.append(str(p))
    tree["units"].write_text("\n".join(paths) + "\n")


def kubeadm(tree: dict[str, Path], default_kubelet: str = "KUBELET_EXTRA_ARGS=\n") -> None:
    install(tree, {"usr/lib/systemd/system/kubelet.service": UNIT,
                   "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf": kubeadm_dropin(tree["root"]),
                   "var/lib/kubelet/kubeadm-flags.env":
                       'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock"\n',
                   "etc/default/kubelet": default_kubelet})


def run(tree: dict[str, Path], *, check: bool = False, state: str = "present") -> dict[str, Any]:
    args = {"config_dir": CONFIG_DIR, "state": state, "dropin": str(tree["dropin"]),
            "_ansible_check_mode": check, "_ansible_diff": True}
    env = {**os.environ, "PATH": f"{tree['bin']}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True,
                          check=False, env=env)
    return dict(json.loads(proc.stdout))


def test_kubeadm_kubelet_gets_the_flag_through_kubelet_config_args(tree: dict[str, Path]) -> None:
    kubeadm(tree)
    assert run(tree, check=True)["changed"] is True and not tree["dropin"].exists()
    result = run(tree)
    assert result["changed"] is True and result["kubelet"] == "dropin" and result["config_dir"] == CONFIG_DIR
    text = tree["dropin"].read_text()
    assert 'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml ' \
           f'--config-dir={CONFIG_DIR}"' in text.splitlines()
    st = tree["dropin"].stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, 0o644)
    # Now systemctl cat shows it: the kubelet's command line carries the flag once, and a rerun changes nothing.
    again = run(tree)
    assert again["changed"] is False and again["kubelet"] == "dropin"


def test_flag_already_given_by_the_admin_is_left_alone_and_ours_removed(tree: dict[str, Path]) -> None:
    kubeadm(tree)
    run(tree)
    assert tree["dropin"].exists()
    kubeadm(tree, default_kubelet=f'KUBELET_EXTRA_ARGS="--config-dir={CONFIG_DIR} --v=2"\n')
    result = run(tree)
    assert result["changed"] is True and result["kubelet"] == "flag" and not tree["dropin"].exists()
    assert run(tree)["changed"] is False


def test_no_kubelet_changes_nothing(tree: dict[str, Path]) -> None:
    result = run(tree)
    assert result["changed"] is False and result["kubelet"] == "absent" and not tree["dropin"].exists()
    # And without the stand-in (a host without systemd, or whose systemctl finds no kubelet unit): the same.
    (tree["bin"] / "systemctl").unlink()
    env_path = os.environ["PATH"]
    try:
        os.environ["PATH"] = "/nonexistent"
        result = run(tree)
    finally:
        os.environ["PATH"] = env_path
    assert result["changed"] is False and result["kubelet"] == "absent"


def test_another_layout_without_the_flag_fails_naming_the_fix(tree: dict[str, Path]) -> None:
    install(tree, {"etc/systemd/system/kubelet.service":
                   "[Service]\nExecStart=/usr/local/bin/kubelet --config=/etc/kubelet.yaml --v=2\n"})
    result = run(tree)
    assert result.get("failed") is True and not tree["dropin"].exists()
    assert f"Fix: add --config-dir={CONFIG_DIR} to the kubelet's arguments" in result["msg"]
    assert "registerWithTaints" in result["msg"]


def test_a_different_config_dir_fails_naming_both(tree: dict[str, Path]) -> None:
    kubeadm(tree, default_kubelet="KUBELET_EXTRA_ARGS=--config-dir /etc/kubelet.d\n")
    result = run(tree)
    assert result.get("failed") is True and "--config-dir=/etc/kubelet.d" in result["msg"]
    assert "host_tuning_kubelet_config_dir: /etc/kubelet.d" in result["msg"]


def test_state_absent_removes_only_ours(tree: dict[str, Path]) -> None:
    kubeadm(tree)
    run(tree)
    result = run(tree, state="absent")
    assert result["changed"] is True and not tree["dropin"].exists()
    assert (tree["root"] / "usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf").exists()


def test_role_ensures_the_flag_before_it_writes_the_drop_in() -> None:
    """roles/host_tuning/tasks/kubelet.yml: the module runs first (a failure leaves no drop-in behind), for the
    same directory, present with taints and absent without, and systemd is reloaded when it changed."""
    import yaml

    tasks = yaml.safe_load((MODULE.parents[2] / "roles/host_tuning/tasks/kubelet.yml").read_text())
    first = tasks[0]
    assert first["kubelet_config_dir"] == {
        "config_dir": "{{ host_tuning_kubelet_config_dir }}",
        "state": "{{ 'present' if host_tuning_kubelet_register_taints | length > 0 else 'absent' }}"}
    assert first["become"] is True and first["notify"] == "Reload systemd"
    handlers = yaml.safe_load((MODULE.parents[2] / "roles/host_tuning/handlers/main.yml").read_text())
    assert any(h["name"] == "Reload systemd" and h["ansible.builtin.systemd_service"]["daemon_reload"]
               for h in handlers)
    writes = [i for i, t in enumerate(tasks) if "managed_files" in t]
    assert writes and writes[0] > 0


def test_role_refuses_a_kubelet_before_it_changes_anything() -> None:
    """roles/host_tuning/tasks/main.yml: the kubelet tasks come right after the preflight, before the first task
    that changes the host, so a refused kubelet (another layout) leaves the host as found (molecule host_tuning's
    side_effect.yml checks it on a node)."""
    import yaml

    tasks = yaml.safe_load((MODULE.parents[2] / "roles/host_tuning/tasks/main.yml").read_text())
    imports = [t.get("ansible.builtin.import_tasks") for t in tasks]
    assert imports.index("kubelet.yml") == imports.index("preflight.yml") + 1
    # Before it: the footprint probe, its end, the preflight; nothing that writes.
    before = {k for t in tasks[:imports.index("kubelet.yml")] for k in t if k.startswith("ansible.builtin.")}
    assert before == {"ansible.builtin.import_role", "ansible.builtin.meta", "ansible.builtin.import_tasks"}


def test_unbalanced_quotes_fail_with_a_message(tree: dict[str, Path]) -> None:
    kubeadm(tree, default_kubelet='KUBELET_EXTRA_ARGS="--v=2\n')
    result = run(tree)
    assert result.get("failed") is True and "could not be read" in result["msg"] and not tree["dropin"].exists()
