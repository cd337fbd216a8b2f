"""Issue 31 point 2, plain hosts: ``node_check.py watch`` (run by the node_validation role's systemd timer) writes
the marker and node exporter's textfile metric through ``actions.run_actions``, clears after the healthy streak,
and runs on a bare python3 (no pydantic, no yaml), as on a host."""

from __future__ import annotations

import ast
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2
import yaml

from gpufleet import REPO_ROOT
from tests.node_programs import assert_role_ships_what_it_imports

GPUSIM = REPO_ROOT / "testbed" / "simulator" / "gpusim.py"
HOST = socket.gethostname().split(".")[0]
BARE = ("import sys\nfor m in ('pydantic', 'pydantic_core', 'yaml', 'rich', 'typer'): sys.modules[m] = None\n"
        "from gpufleet.validation.node_check import main\nsys.exit(main(sys.argv[1:]))")


def _node(tmp: Path) -> tuple[Path, Path]:
    root = tmp / "root"
    (root / "etc/gpusim").mkdir(parents=True)
    (root / "usr/lib/gpusim").mkdir(parents=True)
    (root / "etc/gpusim/board").write_text("h100-hgx\n")
    (root / "usr/lib/gpusim/driver-version").write_text("570.172.08\n")
    smi = tmp / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nGPUSIM_ROOT={root} exec {sys.executable} {GPUSIM} "$@"\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    return root, smi


def _check(tmp: Path, smi: Path, root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BARE, "watch", "--gpus", "8", "--nvidia-smi", str(smi),
         "--kernel-log-file", str(root / "run/gpusim/kmsg"), "--fabricmanager-unit", "gpufleet-test-no-such-unit",
         "--state-dir", str(tmp / "state"), "--textfile-dir", str(tmp / "textfile"), "--healthy-streak", "2"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)


def test_plain_host_marker_metrics_and_streak_on_bare_python(tmp_path: Path) -> None:
    root, smi = _node(tmp_path)
    (tmp_path / "textfile").mkdir()
    marker = tmp_path / "state" / "markers" / f"{HOST}.json"
    prom = tmp_path / "textfile" / "gpufleet_health_actions.prom"
    done = _check(tmp_path, smi, root)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "1"],
                   check=True, timeout=60, env={**os.environ, "GPUSIM_ROOT": str(root)}, capture_output=True)
    done = _check(tmp_path, smi, root)
    assert done.returncode == 0, done.stderr
    data = json.loads(marker.read_text())
    assert data["action"] == "reset-gpu" and data["drain_reason"].startswith("gpufleet:reset-gpu check=ecc-dbe")
    assert (f'gpufleet_health_actions{{host="{HOST}",pool="-",decision="apply",action="reset-gpu",'
            f'failed="false"}} 1') in prom.read_text()
    subprocess.run([sys.executable, str(GPUSIM), "--gpusim-ctl", "set", "--gpu", "3", "--ecc-dbe-volatile", "0"],
                   check=True, timeout=60, env={**os.environ, "GPUSIM_ROOT": str(root)}, capture_output=True)
    _check(tmp_path, smi, root)
    assert marker.exists(), "cleared on one good read"
    assert 'decision="keep"' in prom.read_text()
    _check(tmp_path, smi, root)
    assert not marker.exists()
    assert 'decision="clear"' in prom.read_text()


# --- the node_validation role's timer (rendered here; Molecule is not run for it) ---------------------------

ROLE = REPO_ROOT / "roles" / "node_validation"


def _env() -> Any:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes", "on")
    env.filters["to_json"] = json.dumps
    return env


def _vars(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {**yaml.safe_load((ROLE / "defaults/main.yml").read_text()),
                            **yaml.safe_load((ROLE / "vars/main.yml").read_text()), "ansible_managed": "managed"}
    data["node_validation_driver_package_patterns"] = ["nvidia-driver-*"]
    data.update(over)
    env = _env()
    data["__node_validation_timer_argv"] = ast.literal_eval(
        env.from_string(data["__node_validation_timer_argv"]).render(**data).strip())
    return data


def test_the_role_installs_exactly_the_modules_the_watch_mode_imports() -> None:
    assert_role_ships_what_it_imports(ROLE, "__node_validation_timer_modules", "gpufleet.validation.node_check",
                                      "gpufleet.validation.actions")


def test_timer_unit_and_program_render() -> None:
    from gpufleet.validation import node_check

    v = _vars(node_validation_timer_gpus=8, node_validation_timer_nvswitch=True, node_validation_timer_enabled=True)
    argv = v["__node_validation_timer_argv"]
    ns = node_check.parse_args(argv)
    assert (ns.mode, ns.gpus, ns.nvswitch, ns.healthy_streak, ns.kernel_log_since_s) == ("watch", 8, True, 3, 360)
    assert ns.state_dir == "/var/lib/gpufleet-node-health"
    assert ns.textfile_dir == "/var/lib/node_exporter/textfile_collector"
    env = _env()
    program = env.from_string((ROLE / "templates/node-health.py.j2").read_text()).render(**v)
    compile(program, "gpufleet-node-health", "exec")
    assert f"sys.exit(main({json.dumps(argv)}))" in program
    service = env.from_string((ROLE / "templates/node-health.service.j2").read_text()).render(**v)
    assert "ExecStart=/usr/local/sbin/gpufleet-node-health\n" in service
    assert "StateDirectory=gpufleet-node-health\n" in service and "ProtectSystem=strict\n" in service
    assert "ReadWritePaths=/var/lib/node_exporter/textfile_collector\n" in service
    timer = env.from_string((ROLE / "templates/node-health.timer.j2").read_text()).render(**v)
    assert "OnUnitActiveSec=300\n" in timer and "WantedBy=timers.target" in timer
    # Defaults: no GPU count, no NVSwitch check; the timer is off unless asked for.
    plain = _vars()["__node_validation_timer_argv"]
    assert "--gpus" not in plain and "--nvswitch" not in plain
    assert yaml.safe_load((ROLE / "defaults/main.yml").read_text())["node_validation_timer_enabled"] is False


def test_the_role_imports_the_timer_only_when_enabled() -> None:
    tasks = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    timer = next(t for t in tasks if t.get("ansible.builtin.import_tasks") == "timer.yml")
    assert timer["when"] == "node_validation_timer_enabled | bool"
    specs = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert {k for k in defaults if k.startswith("node_validation_timer_")} <= set(specs)
