"""Issue 30 point 5 (c): the program labels registered Nodes only (a server-side apply of an absent Node
would create it bare); absent hosts are named in a warning; a cluster it cannot list is one ConfigError.
The real-API-server half is tests/test_kueue_apiserver.py::test_label_patches_of_absent_nodes_create_nothing."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError
from gpufleet.infra.offline import evaluate
from gpufleet.infra.registered_nodes import registered_nodes_of
from gpufleet.lock import resolve_lock
from gpufleet.spec import Drift, load_spec

NODE_PATCH = "kubernetes:core/v1:NodePatch"


def test_absent_hosts_get_no_label_patch_and_a_warning() -> None:
    spec = load_spec("onprem-h100").model_copy(update={"drift": Drift(image="registry.example.com/gpufleet:0.1.0")})
    hosts = {h.name for p in spec.pools for h in p.hosts}
    registered = frozenset(hosts - {"sys-0", "gpu-a-1"} | {"someone-elses-node"})
    plan = evaluate(spec, resolve_lock(spec), registered_nodes=registered)
    patches = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"] for r in plan.of_type(NODE_PATCH)}
    assert set(patches) == hosts - {"sys-0", "gpu-a-1"}
    # The drift CronJob's node is the first registered system host, so it can be scheduled.
    assert [n for n, labels in patches.items() if labels.get("gpufleet.io/drift-metrics") == "true"] == ["sys-1"]
    warned = sorted(w.split()[1] for w in plan.warnings if "is not registered in the cluster" in w)
    assert warned == ["gpu-a-1", "sys-0"]
    # Each tainted pool with a registered host still gets its taint Job.
    jobs = [r.inputs["metadata"]["labels"]["gpufleet.io/pool"] for r in plan.of_type("kubernetes:batch/v1:Job")]
    assert sorted(jobs) == ["h100-a", "h100-b", "system"]
    # Not known (an offline plan): every host, as before.
    assert {r.inputs["metadata"]["name"] for r in evaluate(spec, resolve_lock(spec)).of_type(NODE_PATCH)} == hosts


def test_a_cluster_that_cannot_be_listed_is_one_config_error_without_the_secret() -> None:
    seen: list[str] = []

    def refused(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        path = argv[argv.index("--kubeconfig") + 1]
        seen.append(path)
        assert oct(Path(path).stat().st_mode & 0o777) == "0o600"
        return subprocess.CompletedProcess(list(argv), 1, "", "The connection to the server 10.0.0.1:6443 was "
                                           "refused - did you specify the right host or port?")

    spec = load_spec("onprem-h100")
    with pytest.raises(ConfigError) as e:
        registered_nodes_of(spec, "apiVersion: v1\nusers: [{user: {token: s3cret}}]\n", run=refused)
    (problem,) = e.value.problems
    assert problem.key == "gpufleet:kubeconfig" and "s3cret" not in json.dumps(problem.to_json())
    assert "was refused" in problem.rule and "kubectl --kubeconfig" in problem.fix
    assert seen and not Path(seen[0]).exists()  # the clear-text copy is removed


def test_registered_nodes_are_the_listed_names() -> None:
    def listed(argv: Sequence[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        assert list(argv[-3:]) == ["get", "--raw", "/api/v1/nodes"]
        body = {"items": [{"metadata": {"name": "gpu-a-0"}}, {"metadata": {"name": "sys-0"}}]}
        return subprocess.CompletedProcess(list(argv), 0, json.dumps(body), "")

    assert registered_nodes_of(load_spec("onprem-h100"), "kubeconfig", run=listed) == {"gpu-a-0", "sys-0"}
