"""The scale model (issue 17): a no-op converge's and a drift check's wall time on fleets of any size.

Ansible's ``linear`` strategy runs a play task by task: every host of the batch finishes a task before the next
starts, up to ``forks`` hosts at once. So a run is ``tasks per host`` steps, and one step on ``h`` hosts lasts as
long as the larger of

* the controller's CPU for the step: ``h`` host-tasks at ``controller CPU per host-task`` each, spread over the
  controller's cores (at most ``forks`` worker processes use them); on the sandbox, where the nodes run on the
  controller's own cores, the nodes' and the container engine's CPU per host-task join it;
* the hosts' latency: ``ceil(h / forks)`` rounds of one host-task each, a host-task being the controller's work
  for it, the node's module run (its CPU, on its own cores) and the connection's round trips for the share of
  tasks that start a module (a fresh SSH connection per module run, or a channel of a ControlPersist master).

Before the first step the controller starts (imports, inventory and playbook parsing, the lock check): its fixed
CPU, serial. AWX/AAP job slicing runs ``K`` jobs of ``ceil(N / K)`` hosts each on ``K`` execution nodes at once,
each paying the fixed cost and a job start.

:func:`fit_op` takes the per-host-task costs from the scale bench's JSON (benchmarks/results/*-scale.json) by a
least-squares line over the measured N: controller CPU = fixed + slope x N, node and engine CPU the same, tasks
and module runs per GPU node from the runs' own counts. docs/scale.md says which inputs are measured and which
assumed, with the predictions.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from gpufleet import REPO_ROOT

#: The bench's results; the newest ``*-scale.json`` is the model's default input.
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
#: The bench's names of the operations the model predicts (benchmarks/scale.py).
OPERATIONS: dict[str, str] = {"converge": "no-op converge (site.yml)", "drift": "drift"}
#: An earlier bench recorded one extra drift run for its counts; the bench now records every drift run.
RECORDED_DRIFT = "drift (recorded)"

# Assumed (not measured here: the sandbox reaches its nodes through ``docker exec``). See docs/scale.md.
#: Wall time of a fresh SSH connection per module run (TCP + key exchange + auth on a LAN).
SSH_CONNECT_S = 0.25
#: Controller CPU of that handshake (client side key exchange and ssh start-up).
SSH_CONNECT_CPU_S = 0.02
#: A module run's round trip over a ControlPersist master's channel.
SSH_CHANNEL_S = 0.02
#: An AWX/AAP slice job's start: execution-environment pod, project and inventory sync.
SLICE_START_S = 30.0
#: A real controller or AWX execution node's cores.
CONTROLLER_CORES = 8.0

Bound = Literal["controller CPU", "host latency", "shared CPU"]


@dataclass(frozen=True)
class OpCost:
    """What one operation costs per host-task, as measured by the scale bench."""

    name: str
    #: Task results per GPU node (skipped ones included: each is a step of the linear strategy).
    tasks_per_host: float
    #: Of those, the ones that start a module on the host (each a connection round trip).
    module_runs_per_host: float
    #: Controller CPU per run that does not grow with the hosts: start-up, parsing, the lock check, the control node.
    controller_fixed_cpu_s: float
    controller_cpu_per_host_task_s: float
    #: The node's own CPU per host-task (module start-up and run).
    node_cpu_per_host_task_s: float
    #: The container engine's CPU per host-task (``docker exec``: shims, dockerd, containerd); the sandbox's alone.
    engine_cpu_per_host_task_s: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if name != "name" and not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, not {value!r}")
        if self.tasks_per_host <= 0:
            raise ValueError("tasks_per_host must be > 0")


@dataclass(frozen=True)
class Fleet:
    """Where the operation runs."""

    nodes: int
    forks: int
    #: AWX/AAP job slices, each on its own execution node with ``controller_cores``.
    slices: int = 1
    controller_cores: float = CONTROLLER_CORES
    #: The sandbox: the nodes (and the container engine) run on the controller's cores.
    shared_cores: bool = False
    #: Wall time of the connection per module run (0 for the sandbox: ``docker exec``'s cost is CPU, measured).
    connection_s: float = SSH_CHANNEL_S
    #: Controller CPU of the connection per module run, on top of the measured controller CPU.
    connection_cpu_s: float = 0.0
    #: A slice job's start (only with slices > 1).
    slice_start_s: float = SLICE_START_S

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.forks < 1 or self.slices < 1:
            raise ValueError("nodes, forks and slices must be >= 1")
        if self.slices > self.nodes:
            raise ValueError(f"{self.slices} slices for {self.nodes} nodes: at most one slice per node")
        if not self.controller_cores > 0:
            raise ValueError("controller_cores must be > 0")
        if min(self.connection_s, self.connection_cpu_s, self.slice_start_s) < 0:
            raise ValueError("connection and slice times must be >= 0")


@dataclass(frozen=True)
class Prediction:
    op: str
    nodes: int
    hosts_per_slice: int
    #: Seconds of one linear-strategy step (one task on every host of the slice).
    step_s: float
    wall_s: float
    #: Which term sets the step: the controller's CPU, the hosts' latency, or (sandbox) all CPU on shared cores.
    bound: Bound
    #: Controller CPU of the whole operation, all slices.
    controller_cpu_s: float

    def to_json(self) -> dict[str, Any]:
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def predict(op: OpCost, fleet: Fleet) -> Prediction:
    """Wall time of ``op`` on ``fleet`` (see the module's docstring for the model)."""
    hosts = math.ceil(fleet.nodes / fleet.slices)
    module_share = op.module_runs_per_host / op.tasks_per_host
    ctrl_task = op.controller_cpu_per_host_task_s + fleet.connection_cpu_s * module_share
    rounds = math.ceil(hosts / fleet.forks)
    latency = op.node_cpu_per_host_task_s + fleet.connection_s * module_share
    bound: Bound
    if fleet.shared_cores:
        cpu_task = ctrl_task + op.node_cpu_per_host_task_s + op.engine_cpu_per_host_task_s
        cpu_step = hosts * cpu_task / fleet.controller_cores
        latency_step = rounds * (cpu_task + fleet.connection_s * module_share)
        bound = "shared CPU" if cpu_step >= latency_step else "host latency"
    else:
        cpu_step = hosts * ctrl_task / min(fleet.controller_cores, fleet.forks)
        latency_step = rounds * (ctrl_task + latency)
        bound = "controller CPU" if cpu_step >= latency_step else "host latency"
    step = max(cpu_step, latency_step)
    start = fleet.slice_start_s if fleet.slices > 1 else 0.0
    wall = start + op.controller_fixed_cpu_s + op.tasks_per_host * step
    ctrl_total = fleet.slices * op.controller_fixed_cpu_s + fleet.nodes * op.tasks_per_host * ctrl_task
    return Prediction(op.name, fleet.nodes, hosts, step, wall, bound, ctrl_total)


#: Most AWX/AAP slices :func:`awx_slices` proposes: each is a job on its own execution node (capacity to plan for).
MAX_AWX_SLICES = 64


def awx_slices(op: OpCost, fleet: Fleet, target_s: float) -> tuple[int, Prediction]:
    """The fewest job slices (AWX's ``job_slice_count``) whose predicted wall time of ``op`` is at most ``target_s``;
    the most useful count (:data:`MAX_AWX_SLICES` or one per node) with its prediction where none reaches it."""
    best: tuple[int, Prediction] | None = None
    for k in range(1, min(MAX_AWX_SLICES, fleet.nodes) + 1):
        p = predict(op, replace(fleet, slices=k))
        if p.wall_s <= target_s:
            return k, p
        if best is None or p.wall_s < best[1].wall_s:
            best = (k, p)
    assert best is not None
    return best


def drift_limits(hosts: int, k: int) -> list[str]:
    """The ``--limit`` of each of ``k`` parallel drift jobs over one inventory of ``hosts`` hosts.

    AWX's own job slicing cannot run site.yml: each slice's inventory holds only its hosts, so ``groups`` (which
    slurm.conf is rendered from) shrinks and slurm's cluster checks fail (measured, benchmarks/slices.py). Jobs that
    each get the whole inventory and a ``--limit`` keep the cluster whole. Index ranges of ``all`` (inclusive, as
    ansible's subscripts are) split any inventory, since every job orders the same hosts the same way; the last is
    open, so hosts added after sizing land in it. ``k`` is capped at ``hosts``: no job is empty."""
    if hosts < 1 or k < 1:
        raise ValueError(f"hosts ({hosts}) and k ({k}) must be at least 1")
    k = min(k, hosts)
    if k == 1:
        return ["all"]
    starts = [i * hosts // k for i in range(k)]
    out = [f"all[{a}:{b - 1}]" for a, b in itertools.pairwise(starts)]
    return [*out, f"all[{starts[-1]}:]"]


# ------------------------------------------------------------------------------------------ from the bench


def line_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``y = a + b x`` (intercept clamped at 0: a negative start-up cost is noise)."""
    if not points:
        raise ValueError("no points to fit")
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        x, y = points[0]
        return 0.0, y / x
    mx, my = sum(xs) / len(xs), sum(y for _, y in points) / len(points)
    b = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    a = my - b * mx
    if a < 0:
        return 0.0, sum(x * y for x, y in points) / sum(x * x for x in xs)
    return a, b


def _gpu_counts(m: Mapping[str, Any]) -> tuple[float, float]:
    gpu = [c for h, c in m.get("counts", {}).items() if not h.startswith("control")]
    if not gpu:
        raise ValueError(f"{m['op']} at N={m['n']} has no per-host counts")
    return (sum(c["tasks"] for c in gpu) / len(gpu), sum(c["module_runs"] for c in gpu) / len(gpu))


def fit_op(doc: Mapping[str, Any], op: str, *, checkout: str | None = None,
           sizes: Sequence[int] | None = None) -> OpCost:
    """``op`` ("converge" or "drift")'s costs from a scale bench document, for ``checkout`` (default:
    :func:`default_checkout`) over the measured N (or ``sizes``)."""
    name = OPERATIONS[op]
    label = checkout or default_checkout(doc)
    ms = [m for m in doc["measurements"] if m["checkout"] == label and m["rc"] in (0, 2)
          and (sizes is None or m["n"] in sizes)]
    runs = [m for m in ms if m["op"] == name]
    if not runs:
        raise ValueError(f"no {name!r} measurement of checkout {label!r}")
    named = (name, RECORDED_DRIFT) if op == "drift" else (name,)
    counted = [m for m in ms if m["op"] in named and m.get("counts")]
    if not counted:
        raise ValueError(f"no per-host task counts for {name!r} of checkout {label!r}")
    tasks, modules = _gpu_counts(counted[-1])
    ctrl = line_fit([(m["n"], m["controller_cpu_s"]) for m in runs])
    node = line_fit([(m["n"], m["node_cpu_s"] - (m["node_idle_cpu_s"] or 0.0)) for m in runs])
    # The engine: the stack's shims and dockerd + containerd (the daemons' figure also holds other engineers'
    # containers' work when the machine was not quiet: the line's slope then reads low).
    engine = line_fit([(m["n"], (m.get("engine_shim_cpu_s") or 0.0) + (m.get("engine_daemon_cpu_s") or 0.0))
                       for m in runs])
    return OpCost(name=name, tasks_per_host=tasks, module_runs_per_host=modules,
                  controller_fixed_cpu_s=ctrl[0], controller_cpu_per_host_task_s=ctrl[1] / tasks,
                  node_cpu_per_host_task_s=node[1] / tasks, engine_cpu_per_host_task_s=engine[1] / tasks)


def default_checkout(doc: Mapping[str, Any]) -> str:
    """The checkout measured at the largest N (the latest of those): a re-measured baseline at N = 1 only is not
    what the model should scale from."""
    labels = [str(c["label"]) for c in doc["checkouts"]]
    if not labels:
        raise ValueError("the document has no checkouts")
    largest = {label: max((m["n"] for m in doc["measurements"] if m["checkout"] == label
                           and m["op"] == OPERATIONS["converge"]), default=0) for label in labels}
    return max(reversed(labels), key=lambda label: largest[label])


def latest_bench(results: Path = RESULTS_DIR) -> Path:
    found = sorted(results.glob("*-scale.json"))
    if not found:
        raise FileNotFoundError(f"no *-scale.json under {results}")
    return found[-1]


def load_bench(path: Path) -> dict[str, Any]:
    from gpufleet.inputs import read_text

    data = json.loads(read_text(path, "log"))
    if not isinstance(data, dict) or "measurements" not in data or "checkouts" not in data:
        raise ValueError("not a scale bench document (no measurements/checkouts)")
    return data
