"""drain: the GPU node is drained in the real Slurm with the reason; resume brings it back to exact idle."""

import time

import pytest

CONTROL, NODE = "gpufleet-mol-drain-0", "gpufleet-mol-drain-1"


@pytest.fixture
def control(host):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("asked on the controller")
    return host


def _state(host) -> str:
    return host.check_output(f"sinfo --noheader --Node --nodes {NODE} --format %T")


def test_node_is_drained_with_the_reason(control):
    assert _state(control) == "drained"
    assert "Reason=gpufleet: remediate nvidia_driver [" in control.check_output(f"scontrol --oneliner show node {NODE}")


def test_drained_node_takes_no_job(control):
    r = control.run(f"srun --nodelist={NODE} --immediate=2 --time=1 hostname")
    assert r.rc != 0


def test_resume_path_reaches_exact_idle(control):
    # What the role's resume does, checked against the real scontrol: idle* first, then idle.
    assert control.run(f"scontrol update nodename={NODE} state=resume").rc == 0
    deadline = time.monotonic() + 30
    while _state(control) != "idle" and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _state(control) == "idle"
    reason = "'gpufleet: remediate nvidia_driver'"
    assert control.run(f"scontrol update nodename={NODE} state=drain reason={reason}").rc == 0
