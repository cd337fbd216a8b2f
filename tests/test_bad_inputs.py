"""The table of bad inputs (issue 12): every CLI command, given a missing or invalid input, answers with the one
error contract and changes nothing.

Each row: the command line, the input files it gets, the expected exit code, a fragment the error must hold,
and (for every row) the assertion that nothing was written or run: no file appeared or changed under the test's
folder or the repository's inventories/, no playbook, Pulumi, container or plan evaluation was started.
Rows with ``--json`` also check that stdout is the JSON error ``{"error": {file, key, value, message, fix}}``.
Contract: exit 0 success, 1 any error, 2 drift found and the CLI framework's usage errors; no traceback.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import pytest
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.ansible_run import RunResult
from gpufleet.cli import app

runner = CliRunner()

POOLS = """\
  gpufleet:pools:
    - name: system
      role: system
      count: 1
      hosts: [{name: sys-0, address: 192.0.2.10}]
    - name: gpu
      role: gpu
      gpu: h100-sxm5-80gb
      count: 2
      hosts: [{name: gpu-0, address: 192.0.2.20}, {name: gpu-1, address: 192.0.2.21}]
"""
HEAD = """\
config:
  gpufleet:backend: existing
  gpufleet:lock:
    profile: h100-cuda12.8
"""
GOOD = HEAD + POOLS


def stack(*lines: str, pools: str = POOLS, head: str = HEAD) -> str:
    return head + "".join(f"  {ln}\n" for ln in lines) + pools


def pools_with(host_line: str) -> str:
    return POOLS.replace("hosts: [{name: sys-0, address: 192.0.2.10}]", host_line)


BOMB = "config:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"  a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
    f"*a{i - 1}, *a{i - 1}]\n" for i in range(1, 10)) + "  gpufleet:workloadNamespaces: *a9\n"

NCCL_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
               "   busbw #wrong\n#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
               "            (us)  (GB/s)  (GB/s)\n")


def nccl_row(busbw: str) -> str:
    return (f"# nccl-tests all_reduce_perf\n{NCCL_HEADER}"
            f"  8589934592    2147483648     float     sum      -1  36000.1  238.60  {busbw}    0  36000.0"
            f"  238.6  417.5  0\n")


@dataclass
class Case:
    id: str
    argv: list[str]
    code: int
    fragment: str
    #: Files the command reads, by name under the test folder ({dir} in argv): text, bytes, or None (a folder).
    files: dict[str, str | bytes | None] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    #: Must not appear anywhere in the output (a secret).
    absent: str | None = None


def stack_case(id: str, text: str | bytes | None, fragment: str, argv: tuple[str, ...] = ("lock", "check"),
               name: str = "Pulumi.lab.yaml", **kw: Any) -> Case:
    return Case(id, [*argv, "--stack", f"{{dir}}/{name}"], 1, fragment, {name: text}, **kw)


CASES: list[Case] = [
    # --- stack files that are not stack files (point 4) ---
    stack_case("stack-is-a-list", "- a\n- b\n", "a stack file is a mapping with a config: section, not a list"),
    stack_case("stack-is-a-string", "just text\n", "not a str"),
    stack_case("stack-is-a-directory", None, "is a directory, not a file"),
    stack_case("stack-not-utf8", b"config:\n  gpufleet:clusterName: caf\xe9\n", "not UTF-8 text (byte 35"),
    stack_case("stack-integer-keys", "config:\n  1: one\n", "config keys are strings, not int"),
    Case("stack-missing", ["lock", "check", "--stack", "{dir}/nope/Pulumi.gone.yaml"], 1, "stack file not found"),
    Case("stack-name-escapes-stacks-dir", ["lock", "check", "--stack", "../../etc/passwd"], 1, "not a stack name"),
    stack_case("stack-named-dots", GOOD, "is not a DNS-1123 label", name="Pulumi....yaml"),
    stack_case("yaml-syntax", "config: [\n", "error: YAML syntax error"),
    stack_case("yaml-duplicate-key", GOOD.replace("    profile: h100-cuda12.8\n",
                                                  "    profile: h100-cuda12.8\n  gpufleet:lock:\n    profile: "
                                                  "h100-cuda13.0\n"), "duplicate key 'gpufleet:lock'"),
    stack_case("yaml-alias-bomb", BOMB, "expands to more than 2,000,000 nodes through aliases"),
    stack_case("stack-too-large", GOOD + "#" + "x" * 4096 + "\n", "larger than the 0.001 MiB limit",
               env={"GPUFLEET_MAX_INPUT_MB": "0.001"}),
    # --- silent acceptance (point 3) ---
    stack_case("unknown-key", stack("gpufleet:storgae: {}"), "did you mean gpufleet:storage?"),
    stack_case("gpu-operator-overrides", stack("gpufleet:gpuOperator: {driver: {enabled: false}}"),
               "overrides in the stack are not read"),
    stack_case("version-trailing-newline", GOOD.replace("    profile: h100-cuda12.8\n",
                                                        "    profile: h100-cuda12.8\n    versions: {driver: "
                                                        "\"570.172.08\\n\"}\n"), "not a valid driver version"),
    stack_case("kube-system-workloads", stack("gpufleet:workloadNamespaces: [kube-system]"),
               "kube-system is a Kubernetes system namespace"),
    stack_case("count-differs-from-hosts", stack(pools=POOLS.replace("count: 2", "count: 3")),
               "count is 3 but the pool lists 2 hosts"),
    stack_case("host-in-two-pools", stack(pools=pools_with("hosts: [{name: gpu-0, address: 192.0.2.20}]")),
               "host gpu-0 is in pools system and gpu"),
    stack_case("host-in-two-pools-plan", stack(pools=pools_with("hosts: [{name: gpu-0, address: 192.0.2.20}]")),
               "host gpu-0 is in pools system and gpu", argv=("plan",)),
    stack_case("clear-text-kubeconfig", stack("gpufleet:kubeconfig: 'apiVersion: v1 token: s3cr3t-t0ken'"),
               "kubeconfig is a secret and is in clear text", absent="s3cr3t-t0ken"),
    # --- values that would be code or lines (points 1, 2) ---
    stack_case("host-name-newline", stack(pools=pools_with(
        'hosts: [{name: "sys-0\\nSlurmUser=root", address: 192.0.2.10}]')), "not an RFC 1123 host name"),
    stack_case("address-template", stack(pools=pools_with(
        "hosts: [{name: sys-0, address: \"{{ lookup('pipe','id') }}\"}]")), "not an IP address or a DNS name"),
    stack_case("user-template", stack(pools=pools_with(
        "hosts: [{name: sys-0, address: 192.0.2.10, user: \"{{ lookup('pipe','id') }}\"}]")),
        "not a user name"),
    stack_case("cluster-name-template", stack("gpufleet:clusterName: \"{{ lookup('pipe','id') }}\""),
               "not a DNS-1123 label"),
    stack_case("lustre-fsname-template", stack(
        "gpufleet:storage: {lustre: {fsname: \"{{ lookup('pipe','id') }}\", datasets: {mount_path: /d, "
        "capacity_gib: 1}, checkpoints: {mount_path: /c, capacity_gib: 1}}}"), "not a Lustre file system name"),
    stack_case("lustre-fsname-too-long", stack(
        "gpufleet:storage: {lustre: {fsname: ninechars, datasets: {mount_path: /d, capacity_gib: 1}, "
        "checkpoints: {mount_path: /c, capacity_gib: 1}}}"), "not a Lustre file system name"),
    stack_case("namespace-not-dns-label", stack("gpufleet:workloadNamespaces: [Training_1]"),
               "not a DNS-1123 label"),
    # --- every stack command with a missing stack, plain and --json (point 8) ---
    *[Case(f"missing-stack-{'-'.join(argv)}", [*argv, "--stack", "no-such-stack"], 1, "stack file not found")
      for argv in (["lock", "check"], ["lock", "show"], ["plan"], ["converge"], ["converge", "--check"], ["up"],
                   ["status"], ["down"], ["validate"], ["drift"], ["remediate"], ["bench", "bench-render"])],
    *[Case(f"missing-stack-json-{'-'.join(argv)}", [*argv, "--stack", "no-such-stack", "--json"], 1,
           "stack file not found")
      for argv in (["lock", "check"], ["lock", "show"], ["plan"], ["converge"], ["up"], ["status"], ["validate"],
                   ["drift"], ["remediate"])],
    # --- runs that lack what they need (point 4) ---
    stack_case("converge-without-inventory", GOOD, "the stack's inventory does not exist", argv=("converge",)),
    stack_case("drift-without-inventory", GOOD, "the stack's inventory does not exist", argv=("drift",)),
    stack_case("up-without-pulumi", GOOD, "the `pulumi` command was not found on PATH", argv=("up",),
               env={"PATH": "/nonexistent"}),
    stack_case("down-on-a-real-stack", GOOD, "down is for the local sandbox", argv=("down",)),
    Case("drift-inventory-missing", ["drift", "--inventory", "{dir}/missing.yml"], 1, "inventory not found"),
    # --- tool output (points 4, 5, 6) ---
    Case("inspect-nccl-missing", ["inspect", "nccl", "{dir}/none.txt"], 1, "file not found"),
    Case("inspect-nccl-directory", ["inspect", "nccl", "{dir}/logs"], 1, "is a directory", {"logs": None}),
    Case("inspect-nccl-binary", ["inspect", "nccl", "{dir}/b.bin"], 1, "no nccl-tests result rows",
         {"b.bin": bytes(range(256)) * 4}),
    Case("inspect-nccl-nan", ["inspect", "nccl", "{dir}/nan.txt"], 1, "not a finite number in the result table",
         {"nan.txt": nccl_row("nan")}),
    Case("inspect-nccl-inf-json", ["inspect", "nccl", "{dir}/inf.txt", "--json"], 1, "not a finite number",
         {"inf.txt": nccl_row("inf")}),
    Case("inspect-nccl-json-wrong-shape", ["inspect", "nccl", "{dir}/j.json"], 1, "nccl-tests JSON",
         {"j.json": json.dumps({"results": [{"size": "big"}]})}),
    Case("inspect-nccl-json-rows-not-objects", ["inspect", "nccl", "{dir}/j.json"], 1, "unexpected shape",
         {"j.json": json.dumps({"results": [1, 2]})}),
    Case("inspect-nccl-json-infinity", ["inspect", "nccl", "{dir}/j.json"], 1, "holds Infinity",
         {"j.json": '{"results": [{"size": 1, "count": 1, "type": "float", "redop": "sum", '
                    '"out_of_place": {"time": 1, "alg_bw": 1, "bus_bw": Infinity}}]}'}),
    Case("inspect-nccl-too-large", ["--max-input-mb", "0.001", "inspect", "nccl", "{dir}/big.txt"], 1,
         "larger than the 0.001 MiB limit", {"big.txt": nccl_row("417.5") * 20}),
    Case("inspect-smi-missing", ["inspect", "smi-xml", "{dir}/none.xml"], 1, "file not found"),
    Case("inspect-ibnetdiscover-binary", ["inspect", "ibnetdiscover", "{dir}/b.bin", "--json"], 1,
         "no Switch record", {"b.bin": bytes(range(256)) * 4}),
    Case("inspect-ibnetdiscover-too-large", ["--max-input-mb", "0.001", "inspect", "ibnetdiscover", "{dir}/big.txt"],
         1, "larger than the 0.001 MiB limit", {"big.txt": '[1]\t"H-0001"[1](1)\t# "h HCA-1" lid 1 4xEDR\n' * 60}),
    Case("inspect-smi-binary", ["inspect", "smi-xml", "{dir}/b.xml", "--json"], 1, "not UTF-8 text",
         {"b.xml": b"\xff\xfe<nvidia_smi_log>"}),
    Case("bench-gate-unknown-gpu", ["bench", "bench-gate", "{dir}/ok.txt", "--gpu", "h100-sxm5"], 1,
         "unknown GPU model", {"ok.txt": nccl_row("417.5")}),
    Case("bench-gate-missing-file", ["bench", "bench-gate", "{dir}/none.txt", "--gpu", "h100-sxm5-80gb"], 1,
         "file not found"),
    Case("bench-gate-directory", ["bench", "bench-gate", "{dir}/logs", "--gpu", "h100-sxm5-80gb"], 1,
         "is a directory", {"logs": None}),
    Case("bench-gate-binary", ["bench", "bench-gate", "{dir}/b.bin", "--gpu", "h100-sxm5-80gb", "--json"], 1,
         "not UTF-8 text", {"b.bin": bytes(range(256))}),
    Case("bench-gate-inf-busbw", ["bench", "bench-gate", "{dir}/inf.txt", "--gpu", "h100-sxm5-80gb", "--json"], 1,
         "not a finite number", {"inf.txt": nccl_row("inf")}),
    stack_case("bench-render-unknown-gpu", stack(pools=POOLS.replace("gpu: h100-sxm5-80gb", "gpu: h100-sxm5")),
               "h100-sxm5", argv=("bench", "bench-render", "--out", "{dir}/bench")),
    stack_case("bench-render-stack-binary", b"\x00\xff\xfe binary", "not UTF-8 text",
               argv=("bench", "bench-render", "--out", "{dir}/bench")),
    stack_case("bench-render-stack-directory", None, "is a directory",
               argv=("bench", "bench-render", "--out", "{dir}/bench")),
    # --- the CLI framework's own usage errors keep exit 2 ---
    Case("usage-missing-option", ["bench", "bench-gate", "x.txt"], 2, "Missing option '--gpu'"),
]


def _snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        if root.exists():
            for p in root.rglob("*"):
                st = p.lstat()
                out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


class Touched:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def hook(self, name: str, result: Any = None) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return result
        return call


@pytest.fixture
def touched(monkeypatch: pytest.MonkeyPatch) -> Touched:
    import gpufleet.drift.runner
    import gpufleet.infra.offline
    import gpufleet.sandbox.cluster
    import gpufleet.sandbox.platform
    import gpufleet.validation.run
    import gpufleet.workflow

    t = Touched()
    monkeypatch.setattr(gpufleet.workflow, "run_playbook", t.hook("run_playbook", RunResult(rc=0)))
    monkeypatch.setattr(gpufleet.validation.run, "run_playbook", t.hook("run_playbook", RunResult(rc=0)))
    monkeypatch.setattr(gpufleet.drift.runner, "run_playbook", t.hook("run_playbook", RunResult(rc=0)))
    monkeypatch.setattr(gpufleet.infra.offline, "evaluate", t.hook("evaluate"))
    monkeypatch.setattr(gpufleet.sandbox.platform, "prepare", t.hook("platform.prepare"))
    monkeypatch.setattr(gpufleet.sandbox.cluster, "up", t.hook("cluster.up", []))
    monkeypatch.setattr(gpufleet.sandbox.cluster, "down", t.hook("cluster.down", []))
    return t


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, touched: Touched, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        if content is None:
            path.mkdir(parents=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    monkeypatch.chdir(tmp_path)
    before = _snapshot(tmp_path, REPO_ROOT / "inventories")
    argv = [a.replace("{dir}", str(tmp_path)) for a in case.argv]
    env = {k: v for k, v in case.env.items() if k != "PATH"}
    if "PATH" in case.env:
        monkeypatch.setenv("PATH", case.env["PATH"])
    # Empty = the default limits; monkeypatch restores the variable that --max-input-mb sets in-process.
    monkeypatch.setenv("GPUFLEET_MAX_INPUT_MB", "")
    t0 = time.monotonic()
    result = runner.invoke(app, argv, env=env)
    elapsed = time.monotonic() - t0

    # Styles stripped: typer forces a terminal when PY_COLORS is set at all (make test sets PY_COLORS=0), and
    # NO_COLOR removes colours but not bold, so the framework's usage text can carry escape codes.
    out = click.unstyle(result.stdout + result.stderr)
    assert result.exit_code == case.code, out
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), (
        f"traceback: {result.exception!r}")
    assert "Traceback" not in out
    assert case.fragment in out, out
    assert elapsed < 10, f"{case.id} took {elapsed:.1f}s"
    if case.absent:
        assert case.absent not in out
    # Nothing written or changed, nothing run.
    assert _snapshot(tmp_path, REPO_ROOT / "inventories") == before
    assert touched.calls == []
    if case.code == 1:
        heading = result.stderr.splitlines()[0]
        assert heading.startswith("error: "), result.stderr
        if "--json" in argv:
            error = json.loads(result.stdout)["error"]
            assert set(error) >= {"file", "key", "value", "message", "fix"}
            assert case.fragment in json.dumps(error) or case.fragment in result.stderr
        else:
            assert result.stdout == ""


def test_every_error_row_names_file_key_value_and_fix(tmp_path: Path) -> None:
    """The JSON form of a stack problem carries the file, the key path, the value and a fix that exists."""
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(stack("gpufleet:storgae: {lustre: null}"))
    result = runner.invoke(app, ["lock", "check", "--stack", str(path), "--json"])
    assert result.exit_code == 1
    error = json.loads(result.stdout)["error"]
    # An unknown key's value is not read, so it is not shown either: a mistyped secret key holds the secret
    # (issue 27, class 5).
    assert error == {"file": str(path), "key": "gpufleet:storgae", "value": "<redacted>",
                     "message": "unknown key (it would be ignored)",
                     "fix": "did you mean gpufleet:storage? (docs/stack-config.md lists every key)",
                     "kind": "stack file problem"}
    assert (REPO_ROOT / "docs" / "stack-config.md").is_file()


def test_usage_errors_are_the_frameworks_exit_2() -> None:
    result = runner.invoke(app, ["lock", "check"])
    assert result.exit_code == 2
    assert "Missing option '--stack'" in click.unstyle(result.stderr)


def test_error_excerpt_of_an_alias_bomb_is_bounded() -> None:
    from gpufleet.errors import ConfigProblem

    bomb: Any = ["x"] * 10
    for _ in range(30):
        bomb = [bomb] * 10
    text = str(ConfigProblem("f", "k", bomb, "rule", "fix"))
    assert len(text) < 400


def test_yaml_uses_the_c_loader_when_pyyaml_has_it() -> None:
    import yaml

    from gpufleet.inputs import C_LOADER, YamlLoader

    assert yaml.__with_libyaml__ == C_LOADER
    if yaml.__with_libyaml__:
        assert issubclass(YamlLoader, yaml.CSafeLoader)


def test_max_input_flag_raises_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_MAX_INPUT_MB", "")
    log = tmp_path / "big.txt"
    log.write_text(nccl_row("417.5") + "# " + "x" * (70 << 10) + "\n")
    refused = runner.invoke(app, ["--max-input-mb", "0.05", "inspect", "nccl", str(log)])
    assert refused.exit_code == 1 and "larger than the 0.05 MiB limit" in refused.stderr
    accepted = runner.invoke(app, ["--max-input-mb", "1", "inspect", "nccl", str(log), "--json"])
    assert accepted.exit_code == 0, accepted.stderr
    assert json.loads(accepted.stdout)["rows"][0]["out_of_place"]["busbw_gbs"] == 417.5
