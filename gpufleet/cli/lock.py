"""``gpufleet lock``: show the resolved version lock of a stack, check its rules, render it into the inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpufleet.cli.contract import console_for, contract, print_json
from gpufleet.errors import InputError
from gpufleet.inventory import inventory_dir
from gpufleet.lock import VERSION_KEYS, Lock, load_lock, pool_driver, write_group_vars
from gpufleet.lock.digest import DIGEST_FILE
from gpufleet.lock.model import FOLLOW_DRIVER
from gpufleet.spec import ClusterSpec

app = typer.Typer(help="The stack's version lock (profile + overrides) and its compatibility rules.",
                  no_args_is_help=True)

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name under stacks/ or a stack file path")]


def _load(stack: str, console: Console) -> tuple[ClusterSpec, Lock]:
    # Errors (stack file, YAML, lock rules) go through the CLI's error contract, headed by their kind.
    return load_lock(stack)


def _origin(spec: ClusterSpec, key: str) -> str:
    if key in spec.lock.versions:
        return "override"
    if key in FOLLOW_DRIVER:
        return "= driver"
    return "profile"


@app.command()
@contract
def show(stack: StackOpt,
         as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """Print the resolved lock (exit 1, listing every problem, when it breaks a rule)."""
    console = console_for()
    spec, lock = _load(stack, console)
    if as_json:
        print_json(lock.model_dump(mode="json"))
        return
    table = Table(title=f"Version lock of stack {spec.stack} (profile {lock.profile})")
    table.add_column("entry")
    table.add_column("version")
    table.add_column("from")
    for key in VERSION_KEYS:
        value = getattr(lock, key)
        table.add_row(key, "-" if value is None else str(value), _origin(spec, key))
    table.add_row("driver_managed_by", lock.driver_managed_by, "pools' host_management")
    table.add_row("toolkit_managed_by", lock.toolkit_managed_by, "pools' host_management")
    for pool in spec.gpu_pools:
        if pool.host_management == "gke":  # the one mode where the running driver is not the lock's
            table.add_row(f"driver on pool {pool.name}", pool_driver(lock, pool.host_management), "host_management")
    table.add_row("cuda_compat", lock.cuda_compat, "gpufleet:lock.cuda_compat")
    fm_required = str(lock.fabric_manager_required).lower()
    table.add_row("fabric_manager_required", fm_required, "pools' GPUs (NVSwitch)")
    console.print(table)


@app.command()
@contract
def check(stack: StackOpt,
          as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """Check every compatibility rule; exit 0 when the lock is valid, 1 listing every problem."""
    console = console_for()
    spec, lock = _load(stack, console)
    if as_json:
        print_json({"stack": spec.stack, "valid": True, "lock": lock.model_dump(mode="json")})
        return
    console.print(f"lock of stack {spec.stack} is valid (profile {lock.profile}, driver {lock.driver}, "
                  f"CUDA {lock.cuda})", markup=False, highlight=False, soft_wrap=True)


@app.command()
@contract
def render(stack: StackOpt,
           inventory: Annotated[Path | None, typer.Option(
               "--inventory", help="Inventory directory (default inventories/<stack>)")] = None) -> None:
    """Check the rules, then write the lock's variables and their digest into the stack's inventory.

    The fix that ansible/playbooks/lock_check.yml names when an inventory's lock variables were edited by hand.
    """
    console = console_for()
    spec, lock = _load(stack, console)
    out = inventory if inventory is not None else inventory_dir(spec.stack)
    if out.exists() and not out.is_dir():
        raise InputError.one(str(out), "is a file, not an inventory folder",
                             "pass the inventory's folder (it holds hosts.yml and group_vars/)", key="--inventory",
                             kind="input error")
    path = write_group_vars(lock, out)
    console.print(f"lock of stack {spec.stack} is valid (profile {lock.profile}); wrote {path} and "
                  f"{out / DIGEST_FILE}", markup=False, highlight=False, soft_wrap=True)
