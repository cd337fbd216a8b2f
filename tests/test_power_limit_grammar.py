"""One power-limit grammar: the stack file, the lock rules, the gpu_settings preflight and module agree on every value.

Before the grammar was shared, the lock rules accepted ``min`` and ``MAX`` (the role and the module then failed at
converge) while the role and the module accepted ``650.5``, ``92.5%`` and ``700 W`` (the lock refused them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gpufleet import REPO_ROOT
from gpufleet.catalog import GPUS
from gpufleet.errors import ConfigProblem
from gpufleet.lock import resolve_lock
from gpufleet.lock.rules import RuleContext, rule_pool_gpus_and_power
from gpufleet.module_utils.power_limit import GRAMMAR, PowerLimit, PowerLimitError, parse_power_limit
from gpufleet.spec import ClusterSpec, NodePool

#: Value -> watts on an H100 SXM (default 700 W, range 200-700 W), or None where the grammar refuses it.
CASES: list[tuple[Any, float | None]] = [
    ("700", 700.0), (700, 700.0), ("450", 450.0), ("90%", 630.0), ("default", 700.0), ("min", 200.0),
    ("max", 700.0),
    ("MAX", None), ("Default", None), ("650.5", None), ("92.5%", None), ("700 W", None), ("700W", None),
    (" 700", None), ("0", None), ("-5", None), ("0%", None), ("lots", None), (650.5, None), (True, None),
]
H100 = GPUS["h100-sxm5-80gb"]


def _ids(case: tuple[Any, float | None]) -> str:
    return repr(case[0])


@pytest.mark.parametrize(("value", "watts"), CASES, ids=[_ids(c) for c in CASES])
def test_the_grammar(value: Any, watts: float | None) -> None:
    if watts is None:
        with pytest.raises(PowerLimitError) as e:
            parse_power_limit(value)
        assert str(e.value) == f"power limit {value!r} is not {GRAMMAR}"
        return
    limit = parse_power_limit(value)
    assert limit.watts(default=700, minimum=200, maximum=700) == watts
    assert parse_power_limit(str(limit)) == limit  # the canonical text parses back to itself


def test_range_and_missing_readings() -> None:
    with pytest.raises(PowerLimitError, match=r"^power limit '800' = 800 W is outside GPU 3's range 200-700 W$"):
        PowerLimit("watts", 800).watts(default=700, minimum=200, maximum=700, where="GPU 3")
    with pytest.raises(PowerLimitError, match="needs the default limit, which GPU 3 does not report"):
        parse_power_limit("90%").watts(default=None, minimum=None, maximum=None, where="GPU 3")
    # Rounded to whole watts: 33% of 700 W.
    assert parse_power_limit("33%").watts(default=700, minimum=200, maximum=700) == 231.0


# --- every layer, the same answer -----------------------------------------------------------------


def _pool(value: Any) -> dict[str, Any]:
    return {"name": "gpu", "role": "gpu", "gpu": "h100-sxm5-80gb", "count": 1, "power_limit": value}


def spec_accepts(value: Any) -> bool:
    try:
        NodePool.model_validate(_pool(value))
    except ValidationError:
        return False
    return True


def lock_rules_accept(value: Any) -> bool:
    """The power-limit rule on a pool the spec did not validate (as an inventory-built or older spec would be)."""
    valid = ClusterSpec.model_validate({"stack": "t", "backend": "existing", "cluster_name": "t",
                                        "lock": {"profile": "h100-cuda12.8"}, "pools": [_pool(None)]})
    pool = valid.pools[0].model_copy(update={"power_limit": value})
    spec = valid.model_copy(update={"pools": [pool]})
    problems: list[ConfigProblem] = rule_pool_gpus_and_power(RuleContext(spec, resolve_lock(valid),
                                                                         "stacks/Pulumi.t.yaml"))
    return not problems


def test_spec_and_lock_rules_follow_the_grammar() -> None:
    for value, watts in CASES:
        assert spec_accepts(value) is (watts is not None), value
        assert lock_rules_accept(value) is (watts is not None), value


def test_spec_stores_the_canonical_text_and_names_the_grammar() -> None:
    assert NodePool.model_validate(_pool(700)).power_limit == "700"
    with pytest.raises(ValidationError, match=re.escape(f"power limit 'MAX' is not {GRAMMAR}")):
        NodePool.model_validate(_pool("MAX"))


H100_XML = """<?xml version="1.0" ?>
<nvidia_smi_log><driver_version>570.172.08</driver_version>
<gpu id="00000000:19:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name><uuid>GPU-a</uuid>
<persistence_mode>Enabled</persistence_mode>
<gpu_power_readings><power_draw>70.00 W</power_draw><current_power_limit>700.00 W</current_power_limit>
<requested_power_limit>700.00 W</requested_power_limit><default_power_limit>700.00 W</default_power_limit>
<min_power_limit>200.00 W</min_power_limit><max_power_limit>700.00 W</max_power_limit></gpu_power_readings>
</gpu></nvidia_smi_log>
"""

#: One play over every case: the role's real preflight, then the real module (check mode, shipped by Ansible with
#: its module_utils) against an nvidia-smi that prints an H100's XML.
PLAY = """---
- name: Every power limit through the gpu_settings preflight and module
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: One case
      ansible.builtin.include_tasks: case.yml
      loop: "{{ cases }}"
      loop_control:
        loop_var: case
    - name: Verdicts
      ansible.builtin.debug:
        var: verdicts
"""
CASE = """---
- name: Preflight
  block:
    - name: The role's preflight
      ansible.builtin.include_tasks: "{{ preflight }}"
      vars:
        gpu_settings_power_limit: "{{ case }}"
        gpu_settings_application_clocks: {}
        gpu_settings_nvidia_smi: "{{ smi }}"
    - name: Preflight verdict
      ansible.builtin.set_fact:
        verdicts: "{{ verdicts | default([]) + [['preflight', case, 'accept']] }}"
  rescue:
    - name: Preflight verdict
      ansible.builtin.set_fact:
        verdicts: "{{ verdicts | default([]) + [['preflight', case, 'reject']] }}"
- name: Module
  block:
    - name: The module
      gpu_settings:
        power_limit: "{{ case | string }}"
        nvidia_smi: "{{ smi }}"
      check_mode: true
      register: applied
    - name: Module verdict
      ansible.builtin.set_fact:
        verdicts: "{{ verdicts + [['module', case, applied.gpus[0].after.power_limit_w]] }}"
  rescue:
    - name: Module verdict
      ansible.builtin.set_fact:
        verdicts: "{{ verdicts + [['module', case, ansible_failed_result.msg]] }}"
"""


def test_role_preflight_and_module_follow_the_grammar(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    (tmp_path / "h100.xml").write_text(H100_XML)
    smi.write_text(f"#!/bin/sh\nexec cat {tmp_path / 'h100.xml'}\n")
    smi.chmod(0o755)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "case.yml").write_text(CASE)
    (tmp_path / "vars.json").write_text(json.dumps({
        # The bools and floats of CASES are YAML-only spellings; Ansible sees them as a stack file would.
        "cases": [v for v, _ in CASES if not isinstance(v, bool)],
        "preflight": str(REPO_ROOT / "roles" / "gpu_settings" / "tasks" / "preflight.yml"),
        "smi": str(smi),
    }))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO_ROOT / ".collections"), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "t"),
           "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
           "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"}
    r = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                        str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    last = json.loads(r.stdout)["plays"][0]["tasks"][-1]
    verdicts = {(layer, json.dumps(case)): verdict for layer, case, verdict in last["hosts"]["localhost"]["verdicts"]}
    for value, watts in CASES:
        if isinstance(value, bool):
            continue
        key = json.dumps(value)
        assert verdicts[("preflight", key)] == ("accept" if watts is not None else "reject"), value
        # The module reads the limit from `| string`, as the role passes it.
        assert verdicts[("module", key)] == (watts if watts is not None else
                                             f"power limit {str(value)!r} is not {GRAMMAR}"), value
