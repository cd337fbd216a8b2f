"""Scaffolding shared by the cloud backend tests (tests/test_infra_{aws,azure,gcp}.py): the bundled stack and
variants of it, the offline run of the program with Pulumi's public mocks, resource lookup, the platform layer's
view of the backend, the policy pack's verdict and the missing-SDK error.

Each test module builds one :class:`CloudStack` for its bundled stack; nothing here knows a cloud.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.errors import ConfigError
from gpufleet.infra.contract import BackendHandles
from gpufleet.infra.offline import OfflinePlan, PlannedResource, evaluate
from gpufleet.lock import resolve_lock
from gpufleet.spec import STACKS_DIR, ClusterSpec, load_spec

sys.path.insert(0, str(REPO_ROOT / "policy"))
import gpufleet_policies as gp

PV = "kubernetes:core/v1:PersistentVolume"
RELEASE = "kubernetes:helm.sh/v3:Release"
JOB = "kubernetes:batch/v1:Job"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
K8S_PROVIDER = "pulumi:providers:kubernetes"

Change = Callable[[dict[str, Any]], Any]


def evaluate_spec(spec: ClusterSpec) -> OfflinePlan:
    """The program for ``spec`` against the mocks, with the stack's own lock."""
    return evaluate(spec, resolve_lock(spec))


def one(plan: OfflinePlan, type_: str, name: str) -> PlannedResource:
    """The resource of that type and Pulumi name (StopIteration names neither: the assert shows the plan)."""
    found = [r for r in plan.of_type(type_) if r.name == name]
    assert len(found) == 1, (type_, name, [r.name for r in plan.of_type(type_)])
    return found[0]


def gpu_pool(cfg: dict[str, Any]) -> dict[str, Any]:
    """The first GPU pool of a stack's config (a mutable copy's, in a variant's change)."""
    return next(p for p in cfg["gpufleet:pools"] if p["role"] == "gpu")


def resources(plan: OfflinePlan) -> list[tuple[str, dict[str, Any]]]:
    """(type, inputs) of every resource, deep-copied so a test may break one for the policy pack."""
    return [(r.type, copy.deepcopy(r.inputs)) for r in plan.resources]


def violations(items: Iterable[tuple[str, Any]]) -> dict[str, list[str]]:
    """The policy pack's verdict (every policy, as the engine would run them)."""
    return gp.violations(items)


def pvs(plan: OfflinePlan) -> dict[str, dict[str, Any]]:
    """The Lustre PersistentVolumes by Kubernetes name."""
    return {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type(PV)}


class CloudStack:
    """A bundled cloud stack (``stacks/Pulumi.<name>.yaml``), its variants and its SDK module."""

    def __init__(self, name: str, sdk: str, extra: str) -> None:
        self.name, self.sdk, self.extra = name, sdk, extra

    def config(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load((STACKS_DIR / f"Pulumi.{self.name}.yaml").read_text())
        return doc

    def spec(self) -> ClusterSpec:
        return load_spec(self.name)

    def variant_file(self, tmp_path: Path, change: Change, name: str | None = None) -> Path:
        """The stack with ``change`` applied to its config, in a file of its own."""
        doc = self.config()
        change(doc["config"])
        path = tmp_path / f"Pulumi.{name or self.name + '-variant'}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path

    def variant(self, tmp_path: Path, change: Change, name: str | None = None) -> ClusterSpec:
        """The stack with ``change`` applied to its config, loaded (and validated) from a file of its own."""
        return load_spec(str(self.variant_file(tmp_path, change, name)))

    def plan(self) -> OfflinePlan:
        return evaluate_spec(self.spec())

    def problem(self, tmp_path: Path, change: Change, key: str) -> Any:
        """The one ConfigProblem a broken variant reports under ``key`` (the one error contract): from the stack
        validation or the lock rules, as every command meets them."""
        with pytest.raises(ConfigError) as e:
            resolve_lock(self.variant(tmp_path, change))
        problems = e.value.problems
        assert key in [p.key for p in problems], problems
        problem = next(p for p in problems if p.key == key)
        assert problem.fix and str(problem.file).endswith(".yaml")
        return problem

    def platform_backend(self, monkeypatch: pytest.MonkeyPatch) -> tuple[BackendHandles, OfflinePlan]:
        """What the platform layer receives from the backend (a spy on program.Platform), and the plan."""
        from gpufleet.infra import program

        seen: list[BackendHandles] = []
        real = program.Platform

        def spy(name: str, spec: ClusterSpec, lock: Any, backend: BackendHandles, **kw: Any) -> Any:
            seen.append(backend)
            return real(name, spec, lock, backend, **kw)

        monkeypatch.setattr(program, "Platform", spy)
        plan = self.plan()
        (backend,) = seen
        return backend, plan

    def plan_json(self, *args: str, stack: str | Path | None = None) -> tuple[int, dict[str, Any]]:
        """``gpufleet plan --stack <name> --json`` as the CLI runs it (``stack``: a variant's file instead): exit
        code and the parsed output."""
        from gpufleet.cli.plan import app

        r = CliRunner().invoke(app, ["--stack", str(stack or self.name), "--json", *args])
        return r.exit_code, json.loads(r.stdout)

    def without_sdk(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """As if the extra were not installed: importing the SDK fails."""
        monkeypatch.setitem(sys.modules, self.sdk, None)

    def assert_plan_names_install_command(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Without the SDK, ``gpufleet plan --json`` is one error (exit 1) naming the install command."""
        self.without_sdk(monkeypatch)
        code, out = self.plan_json()
        assert code == 1
        (err,) = out["errors"]
        assert err["key"] == "gpufleet:backend" and err["fix"].startswith(f"pip install '.[{self.extra}]'")

    def assert_up_checks_sdk_before_pulumi(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``gpufleet up`` refuses a stack whose SDK is missing before it looks for the Pulumi CLI."""
        from gpufleet.infra import automation
        from gpufleet.workflow import resolve_stack

        calls: list[str] = []
        self.without_sdk(monkeypatch)
        monkeypatch.setattr(automation, "require_cli", lambda *a: calls.append("cli"))
        with pytest.raises(ConfigError) as e:
            automation.up(resolve_stack(self.name))
        assert calls == [] and e.value.problems[0].fix.startswith(f"pip install '.[{self.extra}]'")
