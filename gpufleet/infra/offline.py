"""Offline evaluation of the Pulumi program with the SDK's mocks (``gpufleet plan``).

This runs our program against a mock engine: no Pulumi CLI, no provider plugins, no cluster. It shows
what the program declares (resources, parents, inputs) — it is NOT ``pulumi preview``, which diffs
against real state and lets the providers check the inputs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import mocks as pulumi_mocks

from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec

DISCLAIMER = "offline evaluation with mocks — this is not `pulumi preview`"
#: Marker the SDK puts on a deserialized secret value.
_SECRET_SIG = "4dabf18193072939515e22adb298388d"
REDACTED = "[secret]"
PLACEHOLDER_KUBECONFIG = "offline-plan-placeholder-kubeconfig"


@dataclass
class PlannedResource:
    type: str
    name: str
    urn: str
    #: Name of the parent resource (None for top-level ones) and its URN (names may repeat across types).
    parent: str | None
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any]


@dataclass
class OfflinePlan:
    stack: str
    resources: list[PlannedResource]
    outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> PlannedResource:
        return next(r for r in self.resources if r.name == name)


def redact(value: Any) -> Any:
    if isinstance(value, dict):
        if _SECRET_SIG in value:
            return REDACTED
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        return f"{args.name}-id", dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]] | None]:
        return {}, None


class _Monitor(pulumi_mocks.MockMonitor):
    """Records what the plain mock monitor drops: each resource's parent and whether it is custom."""

    def __init__(self, mocks: _Mocks) -> None:
        super().__init__(mocks)
        self.order: list[tuple[str, str, str, str, bool]] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)  # type: ignore[no-untyped-call]
        if request.type != "pulumi:pulumi:Stack":
            self.order.append((response.urn, request.type, request.name, request.parent, request.custom))
        return response


class _Collect(logging.Handler):
    """Keeps the program's warnings (pulumi.log.warn) for the plan instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.warnings.append(record.getMessage())


def evaluate(spec: ClusterSpec, lock: Lock, *, operator_dcgm_exporter: bool = True) -> OfflinePlan:
    """Run the program for ``spec`` against mocks and return what it declared."""
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    mocks = _Mocks()
    monitor = _Monitor(mocks)
    collect = _Collect()
    logger = logging.getLogger("gpufleet.offline")
    logger.propagate = False
    logger.handlers = [collect]
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.stack, preview=True,
                             monitor=monitor, logger=logger)
    # Program modules are imported only now, after set_mocks, as the SDK's mock testing requires.
    from gpufleet.infra import program

    outputs: dict[str, Any] = {}

    def run() -> None:
        kubeconfig = pulumi.Output.secret(PLACEHOLDER_KUBECONFIG) if spec.backend == "existing" else None
        outputs.update(program.build(spec, lock, kubeconfig, operator_dcgm_exporter=operator_dcgm_exporter))

    _sync_await(run_pulumi_func(run))
    by_urn = {urn: name for urn, _t, name, _p, _c in monitor.order}
    resources = []
    for urn, type_, name, parent, custom in monitor.order:
        state = monitor.resources.get(urn)
        resources.append(PlannedResource(
            type=type_, name=name, urn=urn, parent=by_urn.get(parent),
            parent_urn=parent if parent in by_urn else None, custom=bool(custom),
            inputs=redact(dict(state.state)) if state is not None else {}))
    return OfflinePlan(stack=spec.stack, resources=resources, outputs=outputs, warnings=collect.warnings)
