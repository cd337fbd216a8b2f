"""The Workload object Kueue's job integrations build from a job, for tests that cannot run Kueue's controller
(its image cannot be fetched here) but can apply the Workload to a real API server with the pinned CRD.

Mirrored from kubernetes-sigs/kueue (the release the lock pins, v0.19):

- ``pkg/controller/jobs/job/job_controller.go`` ``PodSets``: a batch Job is one PodSet named ``main`` whose count is
  ``parallelism`` (``completions`` when smaller) and whose topology request carries the pod index label
  ``batch.kubernetes.io/job-completion-index``;
- ``pkg/controller/jobs/mpijob/mpijob_controller.go``: a kubeflow MPIJob is one PodSet per replica type, named in
  lower case (``launcher``, ``worker``), count ``replicas``, pod index label ``training.kubeflow.org/replica-index``;
- ``pkg/controller/jobframework/tas.go`` ``NewPodSetTopologyRequest``: the pod template's
  ``kueue.x-k8s.io/podset-required-topology`` becomes ``topologyRequest.required``, else
  ``-preferred-topology`` becomes ``preferred``; no annotation, no topology request;
- the job reconciler: ``spec.queueName`` from the ``kueue.x-k8s.io/queue-name`` label, and from
  ``kueue.x-k8s.io/priority-class`` a ``priorityClassRef`` to the WorkloadPriorityClass with its ``priority`` value.

What applying it proves and what it does not: docs/scheduling.md, "Checked by tests".
"""

from __future__ import annotations

import copy
from typing import Any

from gpufleet.infra import kueue

JOB_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
MPI_INDEX_LABEL = "training.kubeflow.org/replica-index"


def topology_request(template: dict[str, Any], index_label: str) -> dict[str, Any] | None:
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    if kueue.REQUIRED_TOPOLOGY in annotations:
        return {"required": annotations[kueue.REQUIRED_TOPOLOGY], "podIndexLabel": index_label}
    if kueue.PREFERRED_TOPOLOGY in annotations:
        return {"preferred": annotations[kueue.PREFERRED_TOPOLOGY], "podIndexLabel": index_label}
    return None


def _pod_set(name: str, count: int, template: dict[str, Any], index_label: str) -> dict[str, Any]:
    pod_set: dict[str, Any] = {"name": name, "count": count, "template": copy.deepcopy(template)}
    request = topology_request(template, index_label)
    if request is not None:
        pod_set["topologyRequest"] = request
    return pod_set


def pod_sets(job: dict[str, Any]) -> list[dict[str, Any]]:
    spec = job["spec"]
    if job["kind"] == "Job":
        count = spec.get("parallelism", 1)
        if spec.get("completions") is not None:
            count = min(count, spec["completions"])
        return [_pod_set("main", count, spec["template"], JOB_INDEX_LABEL)]
    if job["kind"] == "MPIJob":
        return [_pod_set(role.lower(), replica["replicas"], replica["template"], MPI_INDEX_LABEL)
                for role, replica in spec["mpiReplicaSpecs"].items()]
    raise ValueError(f"no Workload mirror for {job['kind']}")


def workload_of(job: dict[str, Any], priorities: dict[str, int]) -> dict[str, Any]:
    """The Workload of ``job``; ``priorities``: WorkloadPriorityClass name -> value."""
    labels = job["metadata"].get("labels") or {}
    spec: dict[str, Any] = {"queueName": labels[kueue.QUEUE_LABEL], "podSets": pod_sets(job)}
    priority = labels.get(kueue.PRIORITY_LABEL)
    if priority is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority}
        spec["priority"] = priorities[priority]
    return {"apiVersion": kueue.API, "kind": "Workload",
            "metadata": {"name": f"{job['kind'].lower()}-{job['metadata']['name']}",
                         "namespace": job["metadata"]["namespace"]},
            "spec": spec}
