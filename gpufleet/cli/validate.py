"""``gpufleet validate``: node health checks, nccl-tests gates, the report; ``bench`` subcommands.

``validate_command`` is the plain ``gpufleet validate`` command; ``app`` holds ``bench-render`` and
``bench-gate`` (offline helpers for the acceptance benchmarks).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich.markup import escape
from rich.table import Table

from gpufleet.cli.contract import console_for, contract, dumps, parse_failure
from gpufleet.errors import ConfigProblem, InputError
from gpufleet.validation.bench import BenchVerdict
from gpufleet.validation.health import NodeHealth

if TYPE_CHECKING:
    from gpufleet.validation.actions import ActionPolicy
    from gpufleet.workflow import ResolvedStack

console = console_for(stderr=True)
out = console_for()

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Acceptance benchmarks: render nccl-tests jobs, gate their results.")

StackOpt = Annotated[str, typer.Option("--stack", "-s", help="Stack name (stacks/Pulumi.<stack>.yaml) or path.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


def _security_findings(stack: ResolvedStack, limit: str | None) -> list[dict[str, object]]:
    """Security drift (``gpufleet.drift.security``) of the stack's apt sources and keys, printed; [] when none."""
    from gpufleet.drift.runner import check_security, target_for_stack

    report = check_security(target_for_stack(stack), limit=limit)
    for item in report.security_items:
        console.print(f"[red]security[/red] {escape(item.line())}", highlight=False)
    for e in report.errors:
        console.print(f"[yellow]security check incomplete[/yellow] {escape(e)}", highlight=False)
    return [i.to_json() for i in report.security_items]


def print_nodes(nodes: list[NodeHealth]) -> None:
    table = Table(title="node health")
    for col in ("host", "pool", "status", "GPUs", "driver", "Xids", "action", "findings"):
        table.add_column(col, overflow="fold")
    colour = {"critical": "red", "warning": "yellow", "ok": "green"}
    for n in nodes:
        findings = "\n".join(f"{f.severity}: {f.message}" for f in n.findings if f.severity != "info") or "ok"
        info = sum(1 for f in n.findings if f.severity == "info")
        if info:
            findings += f"\n({info} info)"
        table.add_row(n.host, n.pool or "-", f"[{colour[n.status]}]{n.status}[/]", str(n.gpus or "-"),
                      n.driver or "-", str(n.xid_events), n.action.value if n.action else "-", findings)
    console.print(table)


def print_bench(verdicts: list[BenchVerdict]) -> None:
    table = Table(title="nccl-tests (busbw gated at large messages; algbw reported)")
    for col in ("run", "collective", "scope", "size", "busbw GB/s", "algbw GB/s", "gate", "status"):
        table.add_column(col)
    for v in verdicts:
        r = v.result
        size = "-" if r.size_bytes is None else f"{r.size_bytes / (1 << 30):g} GiB"
        table.add_row(v.label, v.collective, v.scope, size, "-" if r.busbw_gbs is None else f"{r.busbw_gbs:.2f}",
                      "-" if r.algbw_gbs is None else f"{r.algbw_gbs:.2f}",
                      "-" if v.gate is None else f"{v.gate.busbw_gbs:g}", v.status)
    console.print(table)


def _gate_logs(files: list[Path], gpu: str) -> list[BenchVerdict]:
    from gpufleet.catalog import GPUS, get_gpu
    from gpufleet.inputs import read_text
    from gpufleet.parsers import ParseError
    from gpufleet.parsers.nccl import parse_nccl, split_runs
    from gpufleet.validation.bench import gate_result, split_log

    if gpu not in GPUS:
        import difflib

        close = difflib.get_close_matches(gpu, list(GPUS), n=1)
        raise InputError([ConfigProblem("--gpu", "--gpu", gpu, "unknown GPU model",
                                        (f"did you mean {close[0]}? " if close else "")
                                        + f"known: {', '.join(sorted(GPUS))}")], kind="invalid option")
    model = get_gpu(gpu)
    # Read every file first: a missing or unreadable one fails before anything is gated or printed.
    texts = [(f, read_text(f, "log")) for f in files]
    verdicts = []
    for f, text in texts:
        # Every run is gated, each on its own (the worst decides): concatenated logs or a collective marked
        # twice must not be judged by their last run only.
        runs = [(coll, run) for coll, body in (split_log(text) or [("", text)]) for run in split_runs(body)]
        for i, (coll, body) in enumerate(runs, 1):
            label = (f"{f.stem}:{coll}" if coll else f.stem) + (f"#{i}" if len(runs) > 1 else "")
            where = str(f) + (f" ({coll})" if coll else "") + (f" (run {i} of {len(runs)})" if len(runs) > 1 else "")
            try:
                result = parse_nccl(body)
            except ParseError as e:
                raise parse_failure(where, e) from None
            if coll and result.collective is not None and result.collective != coll:
                # The marker is the job template's label; the log's own banner or command line is what ran.
                raise InputError([ConfigProblem(
                    where, "-", coll, f"the section marker says {coll} but the run's own banner or command line "
                    f"says {result.collective}", "pass the job's unmodified log (the marker is printed by the "
                    "bench templates before each collective's command)")], kind="parse error")
            try:
                verdicts.append(gate_result(result, model, label, collective=coll or None))
            except ParseError as e:
                raise parse_failure(where, e) from None
    return verdicts


@contract
def validate_command(
    stack: StackOpt = "local",
    json_out: JsonOpt = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write report.json, report.md and plots here.")]
    = None,
    limit: Annotated[str | None, typer.Option(help="Ansible host pattern.")] = None,
    nccl: Annotated[list[Path] | None, typer.Option(
        "--nccl", help="nccl-tests log(s) of this cluster to gate and include (repeatable).")] = None,
    # 1600 Gb/s bounds it above the fastest InfiniBand port rate on the IBTA roadmap (XDR 800, GDR 1600): a
    # negative or zero rate would pass every port (0 silently meant "the fastest port seen").
    ib_rate: Annotated[int | None, typer.Option(
        min=1, max=1600, help="Expected HCA port rate in Gb/s (default: the fastest port seen on each node).")]
    = None,
    security: Annotated[bool, typer.Option(
        "--security/--no-security",
        help="Also check apt's sources and keys for security drift (trusted=yes, signed-by, keys); fail on it.")]
    = True,
    apply: Annotated[bool, typer.Option(
        "--apply", help="Act on critical findings: taint (Kubernetes), drain (Slurm) or mark (Ansible-only).")]
    = False,
    clear: Annotated[bool, typer.Option(
        "--clear", help="With --apply: clear healthy nodes now instead of after the healthy streak.")] = False,
    apply_to: Annotated[str, typer.Option(
        "--apply-to", help="kubernetes (kubectl, current context), slurm (scontrol) or marker (files).")]
    = "kubernetes",
    max_share: Annotated[float, typer.Option(
        help="Rate limit: share of a pool's nodes acted on at once (at least one).")] = 0.10,
    healthy_streak: Annotated[int, typer.Option(
        help="Consecutive healthy checks before a node acted on is cleared.")] = 3,
    state: Annotated[Path | None, typer.Option(
        help="Action state file (default .gpufleet/<stack>/health-state.json).")] = None,
) -> None:
    """Check every GPU node's health (and gate nccl-tests logs); exit 1 on any critical finding."""
    from gpufleet.outdir import claim
    from gpufleet.validation.run import run_validation
    from gpufleet.workflow import resolve_stack

    policy = _action_policy(stack, apply, clear, apply_to, max_share, healthy_streak)
    resolved = resolve_stack(stack)
    spec = resolved.spec
    # The logs are offline input: read and gated before the playbook runs, so that a missing or unparsable log
    # fails at once, not after every node was checked.
    verdicts: list[BenchVerdict] = []
    if nccl:
        pool = next((p for p in spec.gpu_pools if p.gpu), None)
        if pool is None or pool.gpu is None:
            raise InputError.one(str(stack), "--nccl needs a GPU pool in the stack (its model decides the gate)",
                                 "add a gpu pool to the stack, or gate the logs with `gpufleet bench bench-gate "
                                 "--gpu MODEL`", key="gpufleet:pools", kind="invalid option")
        verdicts = _gate_logs(list(nccl), pool.gpu)
    # Claimed before anything runs: a file there, or a folder of the user's, is refused up front.
    report_dir = claim(report, "--report") if report is not None else None
    result = run_validation(resolved, limit=limit, keep=report_dir, ib_rate_gbps=ib_rate, console=console,
                            live=sys.stderr.isatty())
    print_nodes(result.nodes)
    actions: dict[str, object] | None = None
    if policy is not None:
        from gpufleet.validation.actions import executor_for, run_actions

        state_path = state or Path(".gpufleet") / spec.stack / "health-state.json"
        actions = run_actions(result.nodes, {p.name: p.size for p in spec.pools}, state_path,
                              executor_for(apply_to, state_path.parent / "markers"),  # type: ignore[arg-type]
                              policy, clear)
        print_actions(actions)
    if verdicts:
        print_bench(verdicts)
    weak = _security_findings(resolved, limit) if security else []
    bench_ok = all(v.status not in ("fail", "missing-size") for v in verdicts) and not weak
    if report_dir is not None:
        from gpufleet.report import write_report

        write_report(report_dir, result.stack, result.nodes, verdicts, result.notes)
        console.print(f"report: {report_dir.path / 'report.md'}")
    if json_out:
        data = result.to_json()
        data["bench"] = [v.to_json() for v in verdicts]
        data["security"] = weak
        if actions is not None:
            data["actions"] = actions
        data["ok"] = result.ok and bench_ok
        typer.echo(dumps(data))
    ok = result.ok and bench_ok
    console.print("[green]healthy[/green]" if ok else
                  "[red]not healthy[/red]: critical findings, failed gates or security drift")
    raise typer.Exit(0 if ok else 1)


def _action_policy(stack: str, apply: bool, clear: bool, apply_to: str, max_share: float,
                   healthy_streak: int) -> ActionPolicy | None:
    """The --apply options checked before anything runs (one error naming the option)."""
    from gpufleet.validation.actions import ActionPolicy

    if not apply:
        if clear:
            raise InputError.one(stack, "--clear only acts with --apply", "add --apply", key="--clear",
                                 kind="invalid option")
        return None
    if apply_to not in ("kubernetes", "slurm", "marker"):
        raise InputError.one(stack, f"--apply-to {apply_to!r} is not a target",
                             "use kubernetes, slurm or marker", key="--apply-to", kind="invalid option")
    try:
        return ActionPolicy(max_share=max_share, healthy_streak=healthy_streak)
    except ValueError as e:
        raise InputError.one(stack, str(e), "--max-share in (0, 1], --healthy-streak 1 or more",
                             key="--max-share" if "share" in str(e) else "--healthy-streak",
                             kind="invalid option") from None


def print_actions(actions: dict[str, object]) -> None:
    table = Table(title="actions (--apply)")
    for col in ("host", "pool", "decision", "taint", "drain reason", "result / why"):
        table.add_column(col, overflow="fold")
    results = {(a["host"], a["decision"]): a for a in actions["applied"]}  # type: ignore[attr-defined]
    for i in actions["items"]:  # type: ignore[attr-defined]
        done = results.get((i["host"], i["decision"]))
        table.add_row(i["host"], i["pool"] or "-", i["decision"], i["taint"] or "-", i["drain_reason"] or "-",
                      (done["error"] or done["result"]) if done else i["why"])
    console.print(table)
    if actions["held"]:
        console.print(f"[red]held back by the rate limit[/red]: {actions['held']} node(s) with critical findings "
                      f"not acted on (budget per pool {actions['budgets']}); see the table")


@app.command("bench-gate")
@contract
def bench_gate(
    files: Annotated[list[Path], typer.Argument(help="nccl-tests logs (text or -J JSON; combined job logs split).")],
    gpu: Annotated[str, typer.Option(help="Catalog GPU model, e.g. h100-sxm5-80gb.")],
    json_out: JsonOpt = False,
) -> None:
    """Gate nccl-tests logs on the catalog's busbw gates; exit 1 when one fails or lacks a large message."""
    verdicts = _gate_logs(files, gpu)
    if json_out:
        typer.echo(dumps([v.to_json() for v in verdicts]))
    else:
        print_bench(verdicts)
    raise typer.Exit(0 if all(v.status not in ("fail", "missing-size") for v in verdicts) else 1)


@app.command("bench-render")
@contract
def bench_render(
    stack: StackOpt = "local",
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for the sbatch scripts and manifests.")]
    = Path("bench"),
    image: Annotated[str, typer.Option(help="Container image with nccl-tests and Open MPI (Kubernetes).")]
    = "nccl-tests:set-me",
    nccl_tests_dir: Annotated[str, typer.Option(help="Where the *_perf binaries are on the nodes.")]
    = "/opt/nccl-tests/build",
    gpus_directive: Annotated[str, typer.Option(help="Slurm GPU request: gpus-per-node, gres or none.")]
    = "gpus-per-node",
    check: Annotated[bool, typer.Option(help="Validate manifests; sbatch --test-only on the sandbox.")] = True,
) -> None:
    """Write nccl-tests jobs for every GPU pool: per node, then node pairs (sbatch + Job/MPIJob)."""
    import yaml

    from gpufleet.catalog import get_gpu
    from gpufleet.infra import kueue
    from gpufleet.infra.scheduling import node_taints, toleration
    from gpufleet.lock import load_lock
    from gpufleet.outdir import claim
    from gpufleet.spec import ABS_PATH, PINNED_IMAGE
    from gpufleet.validation.bench import (
        BenchSettings,
        check_sbatch,
        plan_jobs,
        render_k8s,
        render_sbatch,
        sandbox_runner,
        validate_manifest,
    )

    # A typo ("gress") must be refused, not silently become the default.
    if gpus_directive not in ("gpus-per-node", "gres", "none"):
        raise InputError([ConfigProblem("--gpus-directive", "--gpus-directive", gpus_directive,
                                        "not one of gpus-per-node, gres, none",
                                        "pass --gpus-directive gpus-per-node, gres or none")], kind="invalid option")
    # Values that go verbatim into #SBATCH lines and manifests: refused here, naming the option, before any
    # folder is made (the renderer's own check is the last defence and would not name the option).
    if ABS_PATH.fullmatch(nccl_tests_dir) is None:
        raise InputError([ConfigProblem("--nccl-tests-dir", "--nccl-tests-dir", nccl_tests_dir,
                                        "not an absolute path of plain characters (letters, digits, . _ - /)",
                                        "pass the directory of the *_perf binaries on the nodes, e.g. "
                                        "/opt/nccl-tests/build")], kind="invalid option")
    if re.fullmatch(PINNED_IMAGE[1:-1], image) is None:
        raise InputError([ConfigProblem("--image", "--image", image, "not an image reference pinned by tag or "
                                        "digest", "pass e.g. registry.example.com/nccl-tests:2.16.2 or "
                                        "...@sha256:<digest>")], kind="invalid option")
    # load_lock checks the pools' GPU models against the catalog (and every other rule) before writing.
    spec, _lock = load_lock(stack)
    out = claim(out_dir, "--out")
    directive: Literal["gpus-per-node", "gres", "none"] = (
        "gres" if gpus_directive == "gres" else "none" if gpus_directive == "none" else "gpus-per-node")
    env = {k: v for k, v in (("NCCL_IB_HCA", spec.networks.ib_hca),
                             ("NCCL_SOCKET_IFNAME", spec.networks.nccl_socket_ifname)) if v}
    scripts: dict[str, str] = {}
    problems: list[str] = []
    for pool in spec.gpu_pools:
        assert pool.gpu is not None
        model = get_gpu(pool.gpu)
        hosts = [h.name for h in pool.hosts] or [f"{pool.name}-{i}" for i in range(pool.size)]
        if spec.backend == "local":
            from gpufleet.sandbox.cluster import planned_nodes

            hosts = [n.hostname for n in planned_nodes(spec) if n.pool == pool.name]
        settings = BenchSettings(
            gpus_per_node=model.gpus_per_node, nccl_tests_dir=nccl_tests_dir, gpus_directive=directive,
            image=image, namespace=spec.workload_namespaces[0], env=env,
            tolerations=tuple(toleration(t) for t in node_taints(pool)),
            # Kubernetes clusters run Kueue (not the sandbox): admitted whole, kept under one leaf where known.
            job_labels={} if spec.backend == "local" else kueue.job_labels("gpufleet-training"),
            pod_annotations={} if spec.backend == "local" else kueue.podset_annotations(spec, pool))
        for job in plan_jobs(hosts):
            script = render_sbatch(job, settings)
            scripts[job.name] = script
            out.write_text(f"slurm/{job.name}.sbatch", script)
            manifest = render_k8s(job, settings)
            out.write_text(f"kubernetes/{job.name}.yaml", "---\n" + yaml.safe_dump(manifest, sort_keys=False))
            if check:
                problems += [f"{job.name}: {p}" for p in validate_manifest(manifest)]
    console.print(f"wrote {len(scripts)} sbatch scripts and manifests under {out_dir}")
    for p in problems:
        console.print(f"[red]invalid[/red] {p}", highlight=False)
    rejected = False
    if check and spec.backend == "local":
        from gpufleet.sandbox.cluster import planned_nodes

        control = next((n.container for n in planned_nodes(spec) if n.pool != spec.gpu_pools[0].name), None)
        if control is None:
            console.print("sbatch --test-only skipped: the sandbox has no control node")
        else:
            for c in check_sbatch(scripts, sandbox_runner(control)):
                rejected |= c.status == "rejected"
                console.print(f"sbatch --test-only {c.job}: {c.status}: {c.message}", highlight=False)
    elif check:
        console.print("sbatch --test-only skipped: only the local sandbox's Slurm is checked from here; on a real "
                      "cluster run `sbatch --test-only bench/slurm/<job>.sbatch` on a login node")
    raise typer.Exit(1 if problems or rejected else 0)
