"""``gpufleet bench scale-model``: predicted wall time of a no-op converge and a drift check on a fleet."""

from __future__ import annotations

import configparser
import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpufleet.cli.contract import console_for, contract, print_json
from gpufleet.errors import InputError

console = console_for()


def shipped_forks() -> int:
    """``forks`` of ansible/ansible.cfg: the one place it is set."""
    from gpufleet.ansible_run.runner import ANSIBLE_CFG

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ANSIBLE_CFG)
    return cfg.getint("defaults", "forks", fallback=5)


def scale_model_command(
    nodes: Annotated[list[int], typer.Option(help="Fleet size (repeat for several).")] = [100, 1000, 10000],  # noqa: B006
    forks: Annotated[int | None, typer.Option(help="Ansible forks (default: ansible/ansible.cfg's).")] = None,
    slices: Annotated[int, typer.Option(help="AWX/AAP job slices, each on its own execution node.")] = 1,
    controller_cores: Annotated[float, typer.Option(help="Cores of the controller (of each execution node).")]
    = 8.0,
    control_persist: Annotated[bool, typer.Option(
        "--control-persist/--no-control-persist",
        help="SSH ControlPersist (ansible.cfg ships it): a channel per module run, not a new connection.")] = True,
    shared_cores: Annotated[bool, typer.Option(
        help="The sandbox: nodes run on the controller's cores, reached by docker exec (no SSH terms).")] = False,
    bench: Annotated[Path | None, typer.Option(
        help="Scale bench results (default: the newest benchmarks/results/*-scale.json).")] = None,
    checkout: Annotated[str | None, typer.Option(
        help="Which measured checkout's costs (default: the one measured at the largest N).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the inputs and predictions as JSON.")] = False,
    awx_vars: Annotated[Path | None, typer.Option(
        help="Write AWX/AAP sizing (forks, job slice count) for the largest --nodes to this new YAML file, for "
             "ansible/awx/gpufleet_awx.yml: the fewest slices whose predicted drift check meets --awx-target-s.")]
    = None,
    awx_target_s: Annotated[float, typer.Option(
        min=1.0, max=86400.0, help="Drift check wall time the AWX sizing aims at, in seconds.")] = 60.0,
) -> None:
    """Predict a no-op converge's and a drift check's wall time from the scale bench's measured costs."""
    from gpufleet.bench import scale_model as sm

    path = bench
    if path is None:
        try:
            path = sm.latest_bench()
        except FileNotFoundError as e:
            raise InputError.one(str(sm.RESULTS_DIR), str(e), "run `python -m benchmarks.scale run` or pass --bench",
                                 key="--bench", kind="input error") from None
    try:
        doc = sm.load_bench(path)
    except ValueError as e:
        raise InputError.one(str(path), f"not a scale bench result: {e}",
                             "pass a benchmarks/results/*-scale.json file", key="--bench", kind="input error") from None
    try:
        costs = [sm.fit_op(doc, op, checkout=checkout) for op in sm.OPERATIONS]
    except (ValueError, KeyError, TypeError, ZeroDivisionError) as e:
        raise InputError.one(str(path), f"cannot take the model's inputs from it: {e}",
                             "pass a scale bench result with no-op converge and drift runs (and --checkout one of "
                             "its checkouts)", key="--checkout" if checkout else "-", value=checkout,
                             kind="input error") from None
    f = forks if forks is not None else shipped_forks()
    _check_scale_options(nodes, f, slices, controller_cores)
    predictions: list[dict[str, Any]] = []
    for n in nodes:
        try:
            fleet = sm.Fleet(nodes=n, forks=f, slices=slices, controller_cores=controller_cores,
                             shared_cores=shared_cores,
                             connection_s=0.0 if shared_cores else (sm.SSH_CHANNEL_S if control_persist
                                                                    else sm.SSH_CONNECT_S),
                             connection_cpu_s=0.0 if shared_cores or control_persist else sm.SSH_CONNECT_CPU_S)
        except ValueError as e:
            raise InputError.one("-", str(e), "pass --nodes, --forks and --slices >= 1, at most one slice per node",
                                 key="--nodes", value=n, kind="invalid option") from None
        predictions += [sm.predict(c, fleet).to_json() for c in costs]
    if awx_vars is not None:
        write_awx_vars(awx_vars, costs, fleet, awx_target_s)
    data = {"bench": str(path), "checkout": checkout or sm.default_checkout(doc), "forks": f, "slices": slices,
            "controller_cores": controller_cores, "control_persist": control_persist, "shared_cores": shared_cores,
            "inputs": [c.__dict__ for c in costs], "predictions": predictions}
    if json_out:
        print_json(data)
        return
    table = Table(title=f"scale model: forks {f}, {slices} slice(s), {controller_cores:g} controller cores, "
                  + ("shared cores (sandbox)" if shared_cores else
                     "SSH " + ("ControlPersist" if control_persist else "new connection per module run")))
    for col in ("operation", "nodes", "hosts/slice", "step s", "wall", "bound", "controller CPU s"):
        table.add_column(col)
    for p in predictions:
        table.add_row(p["op"], str(p["nodes"]), str(p["hosts_per_slice"]), f"{p['step_s']:.2f}",
                      _duration(p["wall_s"]), p["bound"], f"{p['controller_cpu_s']:.0f}")
    console.print(table)
    console.print(f"inputs: {path} (checkout {data['checkout']}); assumptions: docs/scale.md", highlight=False)


def _check_scale_options(nodes: list[int], forks: int, slices: int, controller_cores: float) -> None:
    """Each option checked on its own, so that an error names the option that is wrong (the model's own check
    cannot tell which one it was given)."""
    checks: list[tuple[str, Any, bool, str, str]] = [
        ("--forks", forks, forks >= 1, "is out of range", "pass --forks 1 or more"),
        ("--slices", slices, slices >= 1, "is out of range", "pass --slices 1 or more"),
        # nan is not > 0 and inf cores would make every controller bound vanish: a finite number of cores.
        ("--controller-cores", controller_cores, math.isfinite(controller_cores) and controller_cores > 0,
         "is out of range", "pass the cores of one controller, a number > 0 (e.g. 8)"),
        *(("--nodes", n, n >= 1, "is out of range", "pass fleet sizes of 1 node or more") for n in nodes),
        *(("--nodes", n, slices <= n, f"is fewer than --slices {slices}: at most one slice per node",
           f"pass --nodes {slices} or more, or --slices {n} or fewer") for n in nodes if n >= 1),
    ]
    for key, value, ok, why, fix in checks:
        if not ok:
            raise InputError.one("-", f"{key} {value} {why}", fix, key=key, value=value, kind="invalid option")


def write_awx_vars(path: Path, costs: list[Any], fleet: Any, target_s: float) -> None:
    """AWX sizing for ``fleet`` (the largest --nodes) into a file that must not exist yet (never overwritten)."""
    from dataclasses import replace

    from gpufleet.bench import scale_model as sm

    drift = next(c for c in costs if c.name == sm.OPERATIONS["drift"])
    k, p = sm.awx_slices(drift, replace(fleet, slices=1), target_s)
    text = (f"---\n# AWX/AAP sizing from the scale model (gpufleet bench scale-model): {fleet.nodes} nodes, "
            f"{fleet.controller_cores:g} cores per execution node;\n"
            f"# predicted drift check {p.wall_s:.0f} s over {k} parallel job(s) ({p.hosts_per_slice} hosts each, "
            f"bound: {p.bound}); target {target_s:g} s.\n"
            f"gpufleet_awx_forks: {fleet.forks}\n"
            f"# The parallel drift workflow's jobs: each runs the whole inventory with one --limit (AWX's own job\n"
            f"# slicing would hand each slice only its hosts, and site.yml reads the cluster).\n"
            "gpufleet_awx_drift_limits:\n"
            + "".join(f'  - "{lim}"\n' for lim in sm.drift_limits(fleet.nodes, k)))
    try:
        with path.open("x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise InputError.one(str(path), "exists already", "pass a new file name (gpufleet never overwrites it)",
                             key="--awx-vars", kind="invalid option") from None
    except OSError as e:
        raise InputError.one(str(path), f"cannot write: {e.strerror or e}", "pass a writable path",
                             key="--awx-vars", kind="invalid option") from None
    # stderr: stdout may be --json's.
    console_for(stderr=True).print(f"wrote {path}: forks {fleet.forks}, {k} parallel drift job(s) (drift "
                                   f"{p.wall_s:.0f} s predicted)", highlight=False)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


def register(app: typer.Typer) -> None:
    from gpufleet.cli.bench_storage import storage_command

    app.command("scale-model")(contract(scale_model_command))
    app.command("storage")(contract(storage_command))
