"""``gpufleet bench storage``: fio (and mdtest) jobs per scratch and Lustre mount, their gates and sources."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from gpufleet.cli.contract import console_for, print_json
from gpufleet.errors import InputError

console = console_for(stderr=True)


def storage_command(
    stack: Annotated[str, typer.Option("--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml) or path.")]
    = "local",
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the fio job files, sbatch scripts, Jobs and "
                                                        "gates.json.")] = Path("bench-storage"),
    image: Annotated[str, typer.Option(help="Container image with fio, mdtest and Open MPI (Kubernetes).")]
    = "storage-bench:set-me",
    json_out: Annotated[bool, typer.Option("--json", help="Print the targets, thresholds and jobs as JSON.")]
    = False,
    check: Annotated[bool, typer.Option(help="Validate the Kubernetes Jobs against the API schema.")] = True,
) -> None:
    """Write fio jobs (seq read/write 1 MiB, random 4 KiB read, one reader per GPU) for the local scratch and each
    Lustre volume of every GPU pool, mdtest for Lustre, and their gates with sources (gates.json)."""
    import yaml

    from gpufleet.catalog import get_gpu
    from gpufleet.infra.scheduling import node_taints, toleration
    from gpufleet.lock import load_lock
    from gpufleet.outdir import claim
    from gpufleet.spec import PINNED_IMAGE
    from gpufleet.validation import storage as st
    from gpufleet.validation.bench import validate_manifest

    if re.fullmatch(PINNED_IMAGE[1:-1], image) is None:
        raise InputError.one("-", f"--image {image} is not an image reference pinned by tag or digest",
                             "pass e.g. registry.example.com/storage-bench:1.0 or ...@sha256:<digest>",
                             key="--image", value=image, kind="invalid option")
    # load_lock checks the stack (pools, GPU models, storage) against every rule before anything is written.
    spec, _lock = load_lock(stack)
    targets = st.plan_targets(spec)
    if not targets:
        raise InputError.one(stack, "the stack has no storage to measure (neither storage.local_nvme nor "
                             "storage.lustre)", "add gpufleet:storage to the stack", key="gpufleet:storage",
                             kind="invalid stack")
    out = claim(out_dir, "--out")
    jobs_json: list[dict[str, Any]] = []
    problems: list[str] = []
    for pool in spec.gpu_pools:
        assert pool.gpu is not None
        hosts = [h.name for h in pool.hosts] or [f"{pool.name}-{i}" for i in range(pool.size)]
        if spec.backend == "local":
            from gpufleet.sandbox.cluster import planned_nodes

            hosts = [n.hostname for n in planned_nodes(spec) if n.pool == pool.name]
        settings = st.StorageSettings(gpus_per_node=get_gpu(pool.gpu).gpus_per_node, image=image,
                                      namespace=spec.workload_namespaces[0],
                                      tolerations=tuple(toleration(t) for t in node_taints(pool)))
        for t in targets:
            out.write_text(f"fio/{pool.name}/{t.name}.fio", st.render_jobfile(t, settings))
        for job in st.plan_jobs(targets, pool.name, hosts):
            out.write_text(f"slurm/{job.name}.sbatch", st.render_sbatch(job, settings))
            manifest = st.render_k8s(job, settings)
            if manifest is not None:
                out.write_text(f"kubernetes/{job.name}.yaml", "---\n" + yaml.safe_dump(manifest, sort_keys=False))
                if check:
                    problems += [f"{job.name}: {p}" for p in validate_manifest(manifest)]
            jobs_json.append({
                "job": job.name, "pool": pool.name, "target": job.target.name, "nodes": list(job.nodes),
                "kubernetes": manifest is not None or "not rendered: the platform mounts the datasets claim "
                                                      "read-only on Kubernetes (run the sbatch script)",
                "gates": {"slurm": st.job_gates(job, settings, f"{settings.output_dir}/{job.name}"),
                          "kubernetes": st.job_gates(job, settings, f"{job.target.mount_path}/gpufleet-bench/"
                                                                    f"results/{job.name}")}})
    data = {"stack": spec.stack, "backend": spec.backend, "targets": [t.to_json() for t in targets],
            "jobs": jobs_json, "out": str(out_dir), "problems": problems}
    out.write_text("gates.json", json.dumps(data, indent=2) + "\n")
    if json_out:
        print_json(data)
    else:
        for t in targets:
            g = t.gates
            console.print(f"{t.name} ({t.kind}, {t.mount_path}): read {g.read_mbps.value or '-'} MB/s, write "
                          f"{g.write_mbps.value or '-'} MB/s, 4k read {g.read_iops.value or '-'} IOPS; "
                          f"source: {g.read_mbps.source}", highlight=False)
        console.print(f"wrote {len(jobs_json)} storage jobs under {out_dir} (gates and commands: gates.json)")
    for p in problems:
        console.print(f"[red]invalid[/red] {p}", highlight=False)
    raise typer.Exit(1 if problems else 0)
