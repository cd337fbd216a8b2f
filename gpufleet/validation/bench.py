"""Acceptance benchmarks: nccl-tests jobs for Slurm and Kubernetes, their results gated per GPU model.

Plan (``plan_jobs``): every GPU node alone first (NVLink/NVSwitch), then pairs of nodes (the fabric),
paired in a ring so each node is in two pairs and a slow pair points at the node both share. Each job
runs ``all_reduce_perf``, ``all_gather_perf`` and ``alltoall_perf`` with ``-b 1G -e 16G -f 2 -g 1``
(one rank per GPU; messages from 1 GiB, where the gate reads, to 16 GiB).

Rendering: Jinja2 templates in ``templates/`` (an sbatch script, a ``batch/v1`` Job for one node, a
kubeflow ``MPIJob`` v2beta1 for a pair). Checks: ``sbatch --test-only`` against a live Slurm controller
(the sandbox's control node when slurmctld runs there), ``kubernetes-validate`` for the Job and the
MPIJob's pod templates, and ``MPIJOB_SCHEMA`` (required fields of the v2beta1 API) for the MPIJob.

Gating (``gate_result``): ``gpufleet.validation.gates.evaluate_busbw`` with the catalog's gate for the
collective and scope (``GpuModel.gate``); collectives the catalog has no gate for are reported with
busbw and algbw but marked ``no-gate``. Never the "Avg bus bandwidth" line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jinja2
import yaml

from gpufleet.catalog.model import BusbwGate, GpuModel
from gpufleet.parsers.errors import ParseError
from gpufleet.parsers.nccl import NcclResult
from gpufleet.validation.gates import GIB, GateResult, evaluate_busbw

TEMPLATES = Path(__file__).parent / "templates"
COLLECTIVES = ("all_reduce", "all_gather", "alltoall")
MIN_BYTES = GIB
MAX_BYTES = 16 * GIB
#: Marker the job scripts print before each collective, so one combined log can be split again.
MARKER = re.compile(r"^=== gpufleet nccl-tests (\w+) ===\s*$", re.MULTILINE)

Scope = Literal["single-node", "multi-node"]

#: ``dcgmi diag`` levels as optional steps before nccl-tests. Durations are the nominal ones of
#: ``dcgmi diag --help`` ("1 - Quick (System Validation ~ seconds)", "2 - Medium (Extended System
#: Validation ~ 2 minutes)", "3 - Long (System HW Diagnostics ~ 15 minutes)") and NVIDIA's DCGM
#: Diagnostics guide (https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html:
#: level 1 as a readiness metric, level 2 as an epilogue on failure, levels 3/4 by an administrator);
#: ``timeout_s`` leaves headroom for 8-GPU boards, where the per-GPU plugins run longer.
DCGM_DIAG_LEVELS: dict[int, dict[str, Any]] = {
    1: {"name": "quick", "expected": "seconds", "timeout_s": 120, "use": "readiness check before every job"},
    2: {"name": "medium", "expected": "~2 minutes", "timeout_s": 600, "use": "after a failed job / before nccl-tests"},
    3: {"name": "long", "expected": "~15 minutes", "timeout_s": 3600, "use": "after maintenance or a hardware swap"},
}


def dcgm_diag_command(level: int) -> list[str]:
    if level not in DCGM_DIAG_LEVELS:
        raise ValueError(f"dcgmi diag level {level} is not one of {sorted(DCGM_DIAG_LEVELS)}")
    return ["dcgmi", "diag", "-r", str(level), "-j"]


def _size_arg(n: int) -> str:
    return f"{n // GIB}G" if n % GIB == 0 else str(n)


def template_env() -> jinja2.Environment:
    """The one Jinja environment of the benchmark job templates (nccl-tests here, storage in
    gpufleet.validation.storage): strict undefined, no autoescape, ``word`` and ``shell_quote`` filters."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             autoescape=False)  # shell and YAML, not HTML
    env.filters["shell_quote"] = lambda v: shlex.quote(str(v))
    env.filters["word"] = word
    return env


#: What an ``#SBATCH`` value or a word inside double quotes may hold: no space, quote, $, ` or line break.
_WORD = re.compile(r"[A-Za-z0-9._,:/%=@+-]+")


def word(value: object) -> str:
    """``value`` when it is one plain word; raises otherwise (the templates' defence against line injection).

    ``#SBATCH`` lines cannot be quoted (sbatch reads them up to the first non-comment line), so a value with
    a newline would become a shell line of the job. Stack values are validated at the source (gpufleet.spec);
    this refuses anything that got past it.
    """
    text = str(value)
    if _WORD.fullmatch(text) is None:
        raise ValueError(f"refusing to render {text[:80]!r} into a job script: not a single plain word")
    return text


@dataclass(frozen=True)
class BenchJob:
    name: str
    scope: Scope
    nodes: tuple[str, ...]


def plan_jobs(nodes: Sequence[str]) -> list[BenchJob]:
    """Each node alone, then ring pairs (n0+n1, n1+n2, ..., n(k-1)+n0; one pair for two nodes)."""
    jobs = [BenchJob(f"nccl-single-{_dns(n)}", "single-node", (n,)) for n in nodes]
    ordered = list(nodes)
    pairs: list[tuple[str, str]] = []
    if len(ordered) == 2:
        pairs = [(ordered[0], ordered[1])]
    elif len(ordered) > 2:
        pairs = [(ordered[i], ordered[(i + 1) % len(ordered)]) for i in range(len(ordered))]
    jobs += [BenchJob(f"nccl-pair-{_dns(a)}-{_dns(b)}", "multi-node", (a, b)) for a, b in pairs]
    return jobs


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")


@dataclass(frozen=True)
class BenchSettings:
    gpus_per_node: int
    nccl_tests_dir: str = "/opt/nccl-tests/build"
    output_dir: str = "/shared/gpufleet/nccl-tests"
    collectives: tuple[str, ...] = COLLECTIVES
    min_bytes: int = MIN_BYTES
    max_bytes: int = MAX_BYTES
    #: Slurm: "gpus-per-node", "gres" (gres.conf with gpu) or "none" (clusters without GPU gres).
    gpus_directive: Literal["gpus-per-node", "gres", "none"] = "gpus-per-node"
    mpi: str = "pmix"
    partition: str | None = None
    time_limit: str = "00:30:00"
    srun_extra: tuple[str, ...] = ()
    #: Kubernetes
    image: str = "nccl-tests:set-me"
    namespace: str = "training"
    tolerations: tuple[dict[str, str], ...] = ()
    launcher_node_selector: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    #: Kueue: the job's queue and priority labels, and the GPU pods' topology annotation (gpufleet.infra.kueue).
    job_labels: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)


def render_sbatch(job: BenchJob, s: BenchSettings) -> str:
    return template_env().get_template("nccl-tests.sbatch.j2").render(
        job_name=job.name, scope=job.scope, nodes=list(job.nodes), gpus_per_node=s.gpus_per_node,
        gpus_directive=s.gpus_directive, time_limit=s.time_limit, output_dir=s.output_dir, partition=s.partition,
        env=dict(sorted(s.env.items())), collectives=list(s.collectives), mpi=s.mpi,
        srun_extra="".join(" " + shlex.quote(a) for a in s.srun_extra), nccl_tests_dir=s.nccl_tests_dir,
        min_bytes_arg=_size_arg(s.min_bytes), max_bytes_arg=_size_arg(s.max_bytes))


def _loop(s: BenchSettings, mpirun: str) -> str:
    exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in sorted(s.env.items()))
    return (f"set -euo pipefail; {exports}for coll in {' '.join(s.collectives)}; do "
            f"echo \"=== gpufleet nccl-tests ${{coll}} ===\"; {mpirun} "
            f"\"{s.nccl_tests_dir}/${{coll}}_perf\" -b {_size_arg(s.min_bytes)} -e {_size_arg(s.max_bytes)} "
            f"-f 2 -g 1; done")


def render_k8s(job: BenchJob, s: BenchSettings) -> dict[str, Any]:
    """A ``batch/v1`` Job (single node) or a kubeflow ``MPIJob`` v2beta1 (several nodes), as a dict."""
    env = template_env()
    common = {"name": job.name, "namespace": s.namespace, "image": s.image, "gpus_per_node": s.gpus_per_node,
              "tolerations": list(s.tolerations), "job_labels": s.job_labels, "pod_annotations": s.pod_annotations}
    if job.scope == "single-node":
        mpirun = f"mpirun --allow-run-as-root --bind-to none -np {s.gpus_per_node}"
        text = env.get_template("nccl-tests-job.yaml.j2").render(node=job.nodes[0], script=_loop(s, mpirun),
                                                                **common)
    else:
        ranks = s.gpus_per_node * len(job.nodes)
        # mpi-operator writes the hostfile; -x passes NCCL settings to the remote ranks.
        xs = "".join(f" -x {k}" for k in sorted(s.env))
        mpirun = f"mpirun --allow-run-as-root --bind-to none -np {ranks} -npernode {s.gpus_per_node}{xs}"
        text = env.get_template("nccl-tests-mpijob.yaml.j2").render(
            nodes=list(job.nodes), script=_loop(s, mpirun), launcher_node_selector=s.launcher_node_selector,
            **common)
    data: dict[str, Any] = yaml.safe_load(text)
    return data


#: Required fields of kubeflow MPIJob v2beta1 (github.com/kubeflow/mpi-operator, pkg/apis/kubeflow/v2beta1/
#: types.go: MPIJobSpec.mpiReplicaSpecs is required, mpiImplementation is OpenMPI|Intel|MPICH; validation.go:
#: exactly one Launcher replica, Worker replicas >= 1, every replica has a pod template with containers).
_REPLICA: dict[str, Any] = {
    "type": "object",
    "required": ["replicas", "template"],
    "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
        "template": {"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["containers"], "properties": {
                "containers": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["name", "image"]}}}}}},
    },
}
MPIJOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubeflow.org/v2beta1"},
        "kind": {"const": "MPIJob"},
        "metadata": {"type": "object", "required": ["name"],
                     "properties": {"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
                                             "maxLength": 63}}},
        "spec": {
            "type": "object",
            "required": ["mpiReplicaSpecs"],
            "properties": {
                "slotsPerWorker": {"type": "integer", "minimum": 1},
                "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
                "runPolicy": {"type": "object", "properties": {
                    "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                    "backoffLimit": {"type": "integer", "minimum": 0}}},
                "mpiReplicaSpecs": {
                    "type": "object",
                    "required": ["Launcher", "Worker"],
                    "additionalProperties": False,
                    "properties": {
                        "Launcher": {"allOf": [_REPLICA, {"properties": {"replicas": {"const": 1}}}]},
                        "Worker": _REPLICA,
                    },
                },
            },
        },
    },
}


def validate_manifest(manifest: dict[str, Any], k8s_version: str | None = None) -> list[str]:
    """Problems of a rendered Job / MPIJob (empty: valid). Needs the test extras (kubernetes-validate)."""
    import jsonschema  # type: ignore[import-untyped]
    import kubernetes_validate

    from gpufleet.infra.manifests import K8S_SCHEMA_VERSION

    version = k8s_version or K8S_SCHEMA_VERSION
    problems: list[str] = []

    def k8s(obj: dict[str, Any], where: str) -> None:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            problems.append(f"{where}: {e.message}")

    if manifest.get("kind") == "MPIJob":
        validator = jsonschema.Draft202012Validator(MPIJOB_SCHEMA)
        problems += [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                     for e in validator.iter_errors(manifest)]
        for role, spec in (manifest.get("spec", {}).get("mpiReplicaSpecs") or {}).items():
            template = spec.get("template") or {}
            # The pod templates are core/v1 PodTemplateSpecs: validate them as Pods.
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"check-{role.lower()}"},
                   "spec": template.get("spec") or {}}
            k8s(pod, f"mpiReplicaSpecs.{role}.template")
    else:
        k8s(manifest, f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}")
    return problems


Runner = Callable[[list[str], str], subprocess.CompletedProcess[str]]


@dataclass(frozen=True)
class SbatchCheck:
    job: str
    status: Literal["ok", "rejected", "skipped"]
    message: str


def sandbox_runner(container: str) -> Runner:
    """Run a command in a sandbox container with stdin (docker exec -i)."""
    def run(cmd: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "exec", "-i", container, *cmd], input=stdin, capture_output=True,
                              text=True, check=False, timeout=60)
    return run


def check_sbatch(scripts: dict[str, str], run: Runner) -> list[SbatchCheck]:
    """``sbatch --test-only`` each script where slurmctld answers; skipped (with why) where it does not."""
    probe = run(["scontrol", "ping"], "")
    if probe.returncode != 0 or "UP" not in probe.stdout:
        why = (probe.stdout + probe.stderr).strip().splitlines()
        reason = f"no Slurm controller answers `scontrol ping` ({why[-1] if why else f'rc {probe.returncode}'})"
        return [SbatchCheck(name, "skipped", reason) for name in scripts]
    out = []
    for name, script in scripts.items():
        r = run(["sbatch", "--test-only"], script)
        text = (r.stdout + r.stderr).strip()
        out.append(SbatchCheck(name, "ok" if r.returncode == 0 else "rejected", text))
    return out


def split_log(text: str) -> list[tuple[str, str]]:
    """A job's combined log (markers printed by the templates) split per collective, in order; a collective
    marked twice (logs concatenated) is there twice, so that both runs are gated."""
    parts = MARKER.split(text)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


@dataclass(frozen=True)
class BenchVerdict:
    label: str
    collective: str
    scope: Scope
    nranks: int | None
    hosts: tuple[str, ...]
    gate: BusbwGate | None
    result: GateResult
    #: (size_bytes, out-of-place busbw GB/s, out-of-place algbw GB/s) of every row, for tables and plots.
    series: tuple[tuple[int, float, float], ...]

    @property
    def status(self) -> str:
        return self.result.status if self.gate is not None else "no-gate"

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label, "collective": self.collective, "scope": self.scope, "nranks": self.nranks,
            "hosts": list(self.hosts), "status": self.status,
            "gate": None if self.gate is None else self.gate.model_dump(),
            "size_bytes": self.result.size_bytes, "busbw_gbs": self.result.busbw_gbs,
            "algbw_gbs": self.result.algbw_gbs, "reason": self.result.reason,
            "rows": [{"size_bytes": s, "busbw_gbs": b, "algbw_gbs": a} for s, b, a in self.series],
        }


def scope_of(result: NcclResult, model: GpuModel) -> Scope:
    hosts = {d.host for d in result.devices}
    if len(hosts) > 1 or (result.nranks or 0) > model.gpus_per_node:
        return "multi-node"
    return "single-node"


def check_plausible(result: NcclResult, model: GpuModel) -> None:
    """Refuse (ParseError) a run whose bus or algorithm bandwidth exceeds what the GPU can move at all: a
    1.7e308 GB/s row must be an error, never a passed gate."""
    ceiling = model.busbw_ceiling_gbs
    for r in result.rows:
        for m in (r.out_of_place, r.in_place):
            if m is None:
                continue
            for what, value in (("busbw", m.busbw_gbs), ("algbw", m.algbw_gbs), ("time", m.time_us)):
                if value < 0 or (what != "time" and value > ceiling):
                    raise ParseError(f"{what} {value:g} at {r.size_bytes} bytes is not a measurement on "
                                     f"{model.key} (0 to {ceiling:g} GB/s, the catalog's NVLink/PCIe peak)")
    if result.avg_busbw_gbs is not None and not 0 <= result.avg_busbw_gbs <= ceiling:
        raise ParseError(f"avg busbw {result.avg_busbw_gbs:g} is not a measurement on {model.key} "
                         f"(0 to {ceiling:g} GB/s)")


def gate_result(result: NcclResult, model: GpuModel, label: str, collective: str | None = None,
                scope: Scope | None = None) -> BenchVerdict:
    """Judge one parsed run against the catalog's gate for its collective and scope (ParseError when a value
    is physically implausible: see check_plausible)."""
    check_plausible(result, model)
    coll = collective or result.collective or "all_reduce"
    sc = scope or scope_of(result, model)
    gate = model.gate(coll, sc)
    judged = evaluate_busbw(result, gate.busbw_gbs if gate else 0.0, gate.min_bytes if gate else MIN_BYTES)
    if gate is None:
        judged = GateResult(**{**judged.to_dict(), "reason": f"no catalog gate for {coll} {sc} on {model.key}: "
                                                             f"reported, not gated"})
    series = tuple((r.size_bytes, r.out_of_place.busbw_gbs, r.out_of_place.algbw_gbs)
                   for r in result.rows if r.out_of_place is not None)
    return BenchVerdict(label, coll, sc, result.nranks, tuple(sorted({d.host for d in result.devices})), gate,
                        judged, series)
