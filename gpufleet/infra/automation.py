"""``gpufleet up --stack S`` for non-local stacks: ``pulumi up`` through the Automation API, then the
inventory hand-off. Converging the hosts with Ansible is the caller's next step, never part of ``pulumi up``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpufleet import REPO_ROOT
from gpufleet.inventory import hosts_from_outputs, inventory_dir, write_inventory

if TYPE_CHECKING:
    from gpufleet.workflow import ResolvedStack

INSTALL_HINT = ("install the Pulumi CLI (curl -fsSL https://get.pulumi.com | sh, see "
                "https://www.pulumi.com/docs/iac/download-install/), then run `pulumi login --local`")


class PulumiCliMissing(RuntimeError):
    """The Automation API drives the ``pulumi`` binary; without it nothing can be deployed."""


def require_cli(which: Callable[[str], str | None] | None = None) -> str:
    path = (which or shutil.which)("pulumi")
    if path is None:
        raise PulumiCliMissing(f"the `pulumi` command was not found on PATH: {INSTALL_HINT}")
    return path


def up(stack: ResolvedStack, *, on_output: Callable[[str], Any] | None = print) -> dict[str, Any]:
    """Run ``pulumi up`` for the resolved ``stack`` (the command's spec and checked lock, never reloaded here),
    write ``inventories/<stack>/``, return the stack outputs."""
    spec, lock = stack.spec, stack.lock
    if spec.backend == "local":
        raise ValueError(f"stack {spec.stack} is the local sandbox: its nodes are containers made by "
                         "`gpufleet up` itself, not by Pulumi")
    from gpufleet.infra.backends import require_sdk

    # Before `pulumi up`: a cloud stack without its SDK would otherwise fail inside the engine.
    require_sdk(spec)
    require_cli()
    from pulumi import automation as auto

    workspace_stack = auto.select_stack(stack_name=spec.stack, work_dir=str(REPO_ROOT))
    result = workspace_stack.up(on_output=on_output)
    outputs = {key: out.value for key, out in result.outputs.items()}
    write_inventory(spec, lock, hosts_from_outputs(outputs.get("inventory") or {}), inventory_dir(spec.stack))
    return outputs
