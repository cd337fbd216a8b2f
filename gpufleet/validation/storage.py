"""Storage acceptance: fio jobs (and mdtest for Lustre) per scratch and Lustre mount, with their gates.

Targets (``plan_targets``): the node-local NVMe scratch (``storage.local_nvme``) and each Lustre volume
(``storage.lustre.datasets`` / ``checkpoints``). One fio job file per target with four sections, each run on its
own (``fio --section``) so that each writes one JSON and is gated on its own (the fio gate sums a direction over
the jobs of one file: a file mixing sections would add sequential and random reads together):

* ``seq-write`` / ``seq-read``: 1 MiB blocks, iodepth 32, one job;
* ``rand-read``: 4 KiB random reads, iodepth 32 x 4 jobs (queue depth 128, where datasheets quote random IOPS);
* ``parallel-read``: 1 MiB reads, one job per GPU of the node (the data loaders of a training job).

Jobs (``plan_jobs``): the scratch per node (its gate is one node's drives); a Lustre volume per GPU pool with every
node at once (the published throughput is the file system's, for all its clients together: the gate sums the
nodes' results) and mdtest from one node, one rank per GPU. Rendered like the nccl-tests jobs
(gpufleet.validation.bench): an sbatch script and a Kubernetes ``batch/v1`` Job per job.

Thresholds (``target_gates``): NVMe from the datasheet class (gpufleet/catalog/storage.yaml) times the listed
drives times the gate fraction; cloud Lustre from the volume's throughput tier times its capacity
(gpufleet/catalog/clouds.yaml, the service's published MB/s per TiB) times the Lustre gate fraction; on-prem
Lustre from the stack's declared tier, if any; a target's ``bench_gates`` replaces any of them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import yaml

from gpufleet.validation.bench import template_env, word

if TYPE_CHECKING:
    from gpufleet.spec import ClusterSpec, LustreVolume, StorageGates

#: Run order: the write lays the files out that the reads then read.
SECTIONS: tuple[tuple[str, Literal["read", "write"], Literal["bw", "iops"]], ...] = (
    ("seq-write", "write", "bw"), ("seq-read", "read", "bw"), ("rand-read", "read", "iops"),
    ("parallel-read", "read", "bw"))
MDTEST_FILES_PER_RANK = 1000
MDTEST_ITERATIONS = 3

Kind = Literal["local", "lustre"]


@dataclass(frozen=True)
class Threshold:
    """One gate: ``value`` in MB/s (10^6 B/s), IOPS or ops/s; None: reported, not gated (``source`` says why)."""

    value: float | None
    source: str


@dataclass(frozen=True)
class TargetGates:
    read_mbps: Threshold
    write_mbps: Threshold
    read_iops: Threshold
    creates_per_s: Threshold
    stats_per_s: Threshold


@dataclass(frozen=True)
class StorageTarget:
    name: Literal["scratch", "datasets", "checkpoints"]
    kind: Kind
    mount_path: str
    gates: TargetGates
    #: Kubernetes mounts the datasets claim read-only (gpufleet.infra.manifests.lustre_volumes): no write there.
    read_only_in_kubernetes: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _override(gates: TargetGates, over: StorageGates | None, key: str) -> TargetGates:
    if over is None:
        return gates
    src = f"stack: {key}.bench_gates"

    def pick(current: Threshold, value: float | None, name: str) -> Threshold:
        return current if value is None else Threshold(value, f"{src}.{name}")

    return TargetGates(pick(gates.read_mbps, over.min_read_mbps, "min_read_mbps"),
                       pick(gates.write_mbps, over.min_write_mbps, "min_write_mbps"),
                       pick(gates.read_iops, over.min_read_iops, "min_read_iops"),
                       pick(gates.creates_per_s, over.min_creates_per_s, "min_creates_per_s"),
                       pick(gates.stats_per_s, over.min_stats_per_s, "min_stats_per_s"))


_NO_MDTEST = Threshold(None, "no published file create/stat rate: set bench_gates.min_creates_per_s / "
                             "min_stats_per_s in the stack to gate it")


def scratch_gates(spec: ClusterSpec) -> TargetGates:
    """Datasheet class x drives x the NVMe gate fraction (one drive where the stack lists none)."""
    from gpufleet.catalog.storage import storage_catalog

    scratch = spec.storage.local_nvme
    assert scratch is not None
    cat = storage_catalog()
    cls = cat.nvme_class(scratch.drive_class)
    name = scratch.drive_class or cat.nvme.default_class
    drives = len(scratch.devices) if scratch.raid0 and scratch.devices else 1
    f = cat.nvme.gate_fraction
    how = (f"{f:g} x {drives} drive(s) x {name} ({cls.description}) datasheet {cls.source}"
           + ("" if scratch.devices else " (devices not listed: gated as one drive)"))
    return TargetGates(Threshold(round(f * drives * cls.seq_read_mbps, 1), how),
                       Threshold(round(f * drives * cls.seq_write_mbps, 1), how),
                       Threshold(round(f * drives * cls.rand_read_iops), how), _NO_MDTEST, _NO_MDTEST)


def lustre_throughput_source(spec: ClusterSpec) -> str | None:
    """Where the volume's per-TiB figure comes from: the cloud's published tiers, or the stack (on-prem)."""
    from gpufleet.catalog.clouds import AWS, AZURE, GCP
    from gpufleet.catalog.storage import storage_catalog

    tiers = {"aws": f"FSx for Lustre PERSISTENT_2 tiers {AWS.fsx_lustre.source}",
             "azure": f"Azure Managed Lustre tiers {AZURE.managed_lustre.tiers_source}",
             "gcp": f"Google Cloud Managed Lustre tiers {GCP.managed_lustre.tiers_source}"}.get(spec.backend)
    scaling = storage_catalog().lustre.throughput_sources.get(spec.backend)
    return None if tiers is None else f"{tiers}; throughput = tier x capacity: {scaling}"


def lustre_gates(spec: ClusterSpec, key: str, vol: LustreVolume) -> TargetGates:
    """Throughput tier (MB/s per TiB) x capacity (TiB) x the Lustre gate fraction, for read and for write."""
    from gpufleet.catalog.storage import storage_catalog

    tier = vol.throughput_mbps_per_tib
    no_iops = Threshold(None, "Lustre services publish no 4 KiB IOPS per tier: reported, not gated "
                              "(bench_gates.min_read_iops gates it)")
    if tier is None:
        none = Threshold(None, f"{key}.throughput_mbps_per_tib is not set: reported, not gated")
        return TargetGates(none, none, no_iops, _NO_MDTEST, _NO_MDTEST)
    f = storage_catalog().lustre.gate_fraction
    tib = vol.capacity_gib / 1024
    where = lustre_throughput_source(spec) or f"declared in the stack ({key}.throughput_mbps_per_tib)"
    t = Threshold(round(f * tier * tib, 1),
                  f"{f:g} x {tier} MB/s/TiB x {tib:g} TiB, summed over the pool's nodes; {where}")
    return TargetGates(t, t, no_iops, _NO_MDTEST, _NO_MDTEST)


def plan_targets(spec: ClusterSpec) -> list[StorageTarget]:
    targets: list[StorageTarget] = []
    scratch = spec.storage.local_nvme
    if scratch is not None:
        targets.append(StorageTarget("scratch", "local", scratch.mount_path,
                                     _override(scratch_gates(spec), scratch.bench_gates, "storage.local_nvme")))
    lustre = spec.storage.lustre
    if lustre is not None:
        for name, vol in (("datasets", lustre.datasets), ("checkpoints", lustre.checkpoints)):
            key = f"storage.lustre.{name}"
            targets.append(StorageTarget(name, "lustre", vol.mount_path,  # type: ignore[arg-type]
                                         _override(lustre_gates(spec, key, vol), vol.bench_gates, key),
                                         read_only_in_kubernetes=name == "datasets"))
    return targets


@dataclass(frozen=True)
class StorageJob:
    name: str
    target: StorageTarget
    pool: str
    nodes: tuple[str, ...]


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")


def plan_jobs(targets: list[StorageTarget], pool: str, nodes: list[str]) -> list[StorageJob]:
    """The scratch on every node alone; each Lustre volume on all the pool's nodes at once."""
    jobs: list[StorageJob] = []
    for t in targets:
        if t.kind == "local":
            jobs += [StorageJob(f"storage-{t.name}-{_dns(n)}"[:63].rstrip("-"), t, pool, (n,)) for n in nodes]
        elif nodes:
            jobs.append(StorageJob(f"storage-{t.name}-{_dns(pool)}"[:63].rstrip("-"), t, pool, tuple(nodes)))
    return jobs


@dataclass(frozen=True)
class StorageSettings:
    gpus_per_node: int
    #: Slurm: a folder every node shares (the sbatch scripts write the job file and results there).
    output_dir: str = "/shared/gpufleet/storage"
    runtime_s: int = 60
    ramp_s: int = 5
    #: Size of each job's file (fio ``size``).
    size: str = "16G"
    mpi: str = "pmix"
    partition: str | None = None
    time_limit: str = "01:00:00"
    image: str = "storage-bench:set-me"
    namespace: str = "training"
    tolerations: tuple[dict[str, Any], ...] = ()
    extra_env: dict[str, str] = field(default_factory=dict)


def render_jobfile(target: StorageTarget, s: StorageSettings) -> str:
    """The target's fio job file (INI): four sections, run one at a time with ``fio --section``."""
    return template_env().get_template("storage.fio.j2").render(
        target=target.name, kind=target.kind, mount=target.mount_path, runtime_s=s.runtime_s, ramp_s=s.ramp_s,
        size=s.size, gpus_per_node=s.gpus_per_node)


def node_script(job: StorageJob, s: StorageSettings, results: str, jobfile: str) -> str:
    """What runs on each node: the four fio sections in order, one JSON each, then the test files removed."""
    t = job.target
    work = f"{word(t.mount_path)}/gpufleet-bench/${{GPUFLEET_NODE}}"
    lines = ["set -euo pipefail",
             'export GPUFLEET_NODE="${GPUFLEET_NODE:-$(hostname -s)}"',
             f'mkdir -p "{results}" "{work}"',
             f"for section in {' '.join(name for name, _, _ in SECTIONS)}; do",
             f'  echo "=== gpufleet fio {t.name} ${{section}} ${{GPUFLEET_NODE}} ==="',
             f'  fio --section="${{section}}" --output-format=json '
             f'--output="{results}/${{GPUFLEET_NODE}}-{t.name}-${{section}}.json" "{jobfile}"',
             "done",
             f'rm -rf "{work}"']
    return "\n".join(lines) + "\n"


def mdtest_command(job: StorageJob, s: StorageSettings) -> str:
    """mdtest on one node, one rank per GPU: files only (-F), create/stat/remove (-C -T -r), a directory per
    rank (-u), MDTEST_ITERATIONS iterations (the gate reads the mean)."""
    return (f"mdtest -F -C -T -r -u -n {MDTEST_FILES_PER_RANK} -i {MDTEST_ITERATIONS} "
            f"-d {word(job.target.mount_path)}/gpufleet-bench/mdtest-{word(job.name)}")


def render_sbatch(job: StorageJob, s: StorageSettings) -> str:
    results = f"{s.output_dir}/{job.name}"
    jobfile = f"{results}/{job.target.name}.fio"
    return template_env().get_template("storage.sbatch.j2").render(
        job_name=job.name, target=job.target.name, kind=job.target.kind, nodes=list(job.nodes),
        time_limit=s.time_limit, output_dir=s.output_dir, partition=s.partition, results=results,
        jobfile=jobfile, jobfile_text=render_jobfile(job.target, s),
        node_script=node_script(job, s, results, jobfile), gpus_per_node=s.gpus_per_node, mpi=s.mpi,
        mdtest=mdtest_command(job, s) if job.target.kind == "lustre" else None)


def render_k8s(job: StorageJob, s: StorageSettings) -> dict[str, Any] | None:
    """A ``batch/v1`` Job (Indexed, one pod per node for Lustre); None where Kubernetes cannot run it (the
    datasets claim is read-only there, and fio must write its files)."""
    t = job.target
    if t.read_only_in_kubernetes:
        return None
    results = f"{t.mount_path}/gpufleet-bench/results/{job.name}"
    jobfile = "/tmp/gpufleet-storage.fio"
    script = (f"cat > {jobfile} <<'GPUFLEET_FIO'\n{render_jobfile(t, s)}GPUFLEET_FIO\n"
              + node_script(job, s, results, jobfile))
    if t.kind == "lustre":
        script += (f'if [ "${{JOB_COMPLETION_INDEX:-0}}" = 0 ]; then mpirun --allow-run-as-root -np '
                   f'{s.gpus_per_node} {mdtest_command(job, s)} | tee "{results}/mdtest.txt"; fi\n')
    text = template_env().get_template("storage-job.yaml.j2").render(
        name=job.name, namespace=s.namespace, image=s.image, nodes=list(job.nodes), kind=t.kind, target=t.name,
        mount=t.mount_path, claim=t.name, tolerations=list(s.tolerations), script=script)
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def job_gates(job: StorageJob, s: StorageSettings, results: str) -> list[dict[str, Any]]:
    """Each section's gate and the command that checks it on the job's results (every node's file at once:
    ``gpufleet inspect fio`` sums the jobs of all the files it is given)."""
    g = job.target.gates
    out: list[dict[str, Any]] = []
    for section, direction, metric in SECTIONS:
        th = (g.read_iops if metric == "iops" else g.read_mbps if direction == "read" else g.write_mbps)
        option = f"--min-{direction}-{'iops' if metric == 'iops' else 'mbps'}"
        files = f"{results}/*-{job.target.name}-{section}.json"
        out.append({"section": section, "direction": direction, "metric": metric, "threshold": th.value,
                    "source": th.source, "files": files,
                    "command": f"gpufleet inspect fio {files}" + (f" {option} {th.value:g}" if th.value else "")})
    if job.target.kind == "lustre":
        cmd = f"gpufleet inspect mdtest {results}/mdtest.txt"
        for th, opt in ((g.creates_per_s, "--min-creates"), (g.stats_per_s, "--min-stats")):
            if th.value:
                cmd += f" {opt} {th.value:g}"
        out.append({"section": "mdtest", "creates_per_s": asdict(g.creates_per_s),
                    "stats_per_s": asdict(g.stats_per_s), "files": f"{results}/mdtest.txt", "command": cmd})
    return out
