"""dpkg's state per package, read from the run's own dpkg reads (dpkg-query formats, the dpkg_hold module), and the
interrupted-dpkg finding. The dpkg-query lines are real (tests/fixtures/drift/dpkg_interrupted.txt)."""

from __future__ import annotations

from pathlib import Path

from gpufleet.ansible_run import HostStats, RunResult, TaskResult, build_result
from gpufleet.drift import RawResults, build_report
from gpufleet.drift.dpkg import PackageState, fold, parse_dpkg_query, states_of

CAPTURE = (Path(__file__).parent / "fixtures" / "drift" / "dpkg_interrupted.txt").read_text()
DRIVER_FMT = "-f=${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\\n"
VALIDATION_FMT = "-f=${Package}|${Version}|${db:Status-Abbrev}\\n"


def _output(command_start: str) -> str:
    """The lines the capture shows after the command starting with ``command_start``."""
    block = CAPTURE.split(f"$ {command_start}", 1)[1].split("\n", 1)[1]
    return block.split("\n$ ", 1)[0]


def test_want_and_status_fields_as_the_driver_role_reads_them() -> None:
    states = parse_dpkg_query(["dpkg-query", "-W", DRIVER_FMT, "gfa", "gfb", "gfc"],
                              _output("dpkg-query -W -f='${Package} ${Version}"))
    assert [(s.name, s.version, s.selection, s.status, s.interrupted) for s in states] == [
        ("gfa", "1.0", "install", "unpacked", True),
        ("gfb", "1.0", "install", "half-configured", True),
        ("gfc", "1.0", "install", "half-installed", True),
    ]


def test_status_abbrev_with_the_reinst_required_flag() -> None:
    states = parse_dpkg_query(["dpkg-query", "-W", VALIDATION_FMT, "gfa", "gfb", "gfc"],
                              _output("dpkg-query -W -f='${Package}|${Version}|${db:Status-Abbrev}"))
    assert [s.abbrev for s in states] == ["iU", "iF", "iHR"]
    assert states[2].reinst_required and states[2].interrupted_text() == (
        "gfc 1.0 half-installed, reinstall required (iHR)")


def test_held_and_installed_packages_are_not_interrupted() -> None:
    out = ("nvidia-utils-570 570.172.08-0ubuntu1 hold installed\n"
           "libnccl2 2.26.2-1+cuda12.8 install installed\nnvidia-dkms-570-open  unknown not-installed\n")
    states = {s.name: s for s in parse_dpkg_query(["dpkg-query", "-W", DRIVER_FMT], out)}
    assert states["nvidia-utils-570"].hold_text() == "held" and not states["nvidia-utils-570"].interrupted
    assert states["libnccl2"].hold_text() == "not held"
    assert not states["nvidia-dkms-570-open"].installed


def test_other_commands_and_formats_without_package_are_ignored() -> None:
    assert parse_dpkg_query(["dpkg-query", "-W", "-f=${Version}\\n", "x"], "1.0\n") == []
    assert parse_dpkg_query(["nvidia-smi", "-q"], "x y z w\n") == []
    assert states_of("ansible.builtin.shell", {"cmd": "dpkg-query -W x", "stdout": "x 1 hold installed"}) == []


def test_the_dpkg_hold_module_result_and_later_reads_complete_each_other() -> None:
    hold = {"before": {"libnccl2": "install", "libnccl-dev": "not installed"},
            "installed": {"libnccl2": "2.25.1-1+cuda12.8", "libnccl-dev": None},
            "status": {"libnccl2": "unpacked", "libnccl-dev": "not-installed"}}
    query = {"cmd": ["dpkg-query", "-W", VALIDATION_FMT, "libnccl2"], "stdout": "libnccl2|2.25.1-1+cuda12.8|iUR\n"}
    states = fold([("gpu-0", "dpkg_hold", hold), ("gpu-0", "ansible.builtin.command", query)])["gpu-0"]
    assert states["libnccl2"] == PackageState("libnccl2", "2.25.1-1+cuda12.8", "install", "unpacked", True)
    assert not states["libnccl-dev"].installed


def test_an_interrupted_install_is_a_finding_of_its_own_and_drains_the_driver_node() -> None:
    read = TaskResult(host="gpu-0", play="p", role="nvidia_driver", task="Read the installed versions",
                      action="ansible.builtin.command", status="ok", changed=False,
                      res={"cmd": ["dpkg-query", "-W", DRIVER_FMT, "nvidia-utils-570", "nvidia-dkms-570-open"],
                           "stdout": "nvidia-utils-570 570.172.08-0ubuntu1 install unpacked\n"
                                     "nvidia-dkms-570-open 570.172.08-0ubuntu1 hold installed\n"})
    run = RunResult(rc=0, status="successful", check=True, hosts={"gpu-0": HostStats(ok=1)}, tasks=[read])
    report = build_report(run)
    assert [(i.kind, i.line()) for i in report.items] == [(
        "dpkg", "gpu-0 nvidia_driver: dpkg was interrupted: nvidia-utils-570 570.172.08-0ubuntu1 unpacked, not "
                "configured (iU); converge recovers it (`dpkg --configure -a`, then the pinned install)")]
    assert report.needs_drain("gpu-0") and report.exit_code == 2


def _event(role: str, uuid: str, line: int, action: str, res: dict[str, object]) -> dict[str, object]:
    # What the events carry for a task of the shared install path imported by a package role: the path is
    # the shared file's, the role and the uuid are the importing role's.
    return {"event": "runner_on_ok", "event_data": {
        "host": "gpu-0", "play": "GPU nodes", "role": role, "task": "Hold the packages", "task_uuid": uuid,
        "task_path": f"{{project}}/roles/pinned_packages/tasks/install.yml:{line}", "resolved_action": action,
        "res": res}}


def test_one_role_s_changed_hold_does_not_hide_another_role_s_read_of_the_same_shared_task() -> None:
    # The drift scenario's gpufleet-mol-drift-1: nvidia-utils-570 unheld (the driver's read would hold it again:
    # changed), NCCL downgraded and unheld (NCCL's read finds it moving: unchanged). Both reads are the same task
    # of install.yml; keyed by its path, the driver's result stood for NCCL's and NCCL's hold state was lost.
    driver = _event("nvidia_driver", "uuid-1", 17, "dpkg_hold", {
        "changed": True, "changed_packages": ["nvidia-utils-570"], "moving": [],
        "before": {"nvidia-utils-570": "install"}, "installed": {"nvidia-utils-570": "570.172.08-0ubuntu1"},
        "status": {"nvidia-utils-570": "installed"}})
    nccl = _event("nccl", "uuid-2", 17, "dpkg_hold", {
        "changed": False, "changed_packages": [], "moving": ["libnccl2", "libnccl-dev"],
        "before": {"libnccl2": "install", "libnccl-dev": "install"},
        "installed": {"libnccl2": "2.25.1-1+cuda12.8", "libnccl-dev": "2.25.1-1+cuda12.8"},
        "status": {"libnccl2": "installed", "libnccl-dev": "installed"}})
    apt = _event("nccl", "uuid-3", 30, "ansible.builtin.apt", {
        "changed": True, "stdout": "Inst libnccl2 [2.25.1-1+cuda12.8] (2.26.2-1+cuda12.8 cuda [amd64])\n"
                                   "Inst libnccl-dev [2.25.1-1+cuda12.8] (2.26.2-1+cuda12.8 cuda [amd64])\n"})
    events = [driver, nccl, apt]
    raw = RawResults()
    for e in events:
        raw(e)
    report = build_report(build_result(events, rc=0, status="successful", check=True), raw)
    assert [i.line() for i in report.items] == [
        "gpu-0 nvidia_driver: nvidia-utils-570: 570.172.08-0ubuntu1 installed, as locked; not held, expected held",
        "gpu-0 nccl: libnccl2, libnccl-dev: 2.25.1-1+cuda12.8 installed, 2.26.2-1+cuda12.8 locked; not held"]


def test_the_install_path_s_read_names_the_interrupted_driver_packages_and_drains_only_for_them() -> None:
    # The dpkg_interrupt scenario's check run: apt was killed while dpkg unpacked the driver 570.133.20 -> 570.172.08.
    # Every package role's read (dpkg_hold, recover: true) reports the host's interrupted packages and would recover
    # them (changed); the driver's names its own, NCCL's the same map. apt's simulation moves what is half done.
    broken = {"nvidia-driver-570-open": {"version": "570.172.08-0ubuntu1", "selection": "install",
                                         "status": "unpacked", "reinst_required": False, "abbrev": "iU"},
              "nvidia-utils-570": {"version": "570.133.20-0ubuntu1", "selection": "install",
                                   "status": "half-installed", "reinst_required": True, "abbrev": "iHR"},
              "libfoo1": {"version": "1.0", "selection": "install", "status": "half-configured",
                          "reinst_required": False, "abbrev": "iF"}}
    notice = {"event": "would recover interrupted dpkg", "detail": "..."}
    driver = _event("nvidia_driver", "uuid-1", 17, "dpkg_hold", {
        "changed": True, "recovered": True, "changed_packages": [], "interrupted": broken, "gpufleet_notice": notice,
        "moving": ["nvidia-driver-570-open", "nvidia-utils-570", "libnvidia-compute-570"],
        "before": {"nvidia-driver-570-open": "install", "nvidia-utils-570": "install",
                   "libnvidia-compute-570": "hold"},
        "installed": {"nvidia-driver-570-open": "570.172.08-0ubuntu1", "nvidia-utils-570": "570.133.20-0ubuntu1",
                      "libnvidia-compute-570": "570.133.20-0ubuntu1"},
        "status": {"nvidia-driver-570-open": "unpacked", "nvidia-utils-570": "half-installed",
                   "libnvidia-compute-570": "installed"}})
    # apt's [old] for the unpacked metapackage is the version it last saw configured; dpkg has the new one unpacked.
    apt = _event("nvidia_driver", "uuid-2", 30, "ansible.builtin.apt", {
        "changed": True, "stdout": "Inst nvidia-utils-570 [570.133.20-0ubuntu1] (570.172.08-0ubuntu1 x)\n"
                                   "Inst nvidia-driver-570-open [570.133.20-0ubuntu1] (570.172.08-0ubuntu1 x)\n"
                                   "Inst libnvidia-compute-570 [570.133.20-0ubuntu1] (570.172.08-0ubuntu1 x)\n"})
    nccl = _event("nccl", "uuid-3", 17, "dpkg_hold", {
        "changed": True, "recovered": True, "changed_packages": [], "interrupted": broken, "gpufleet_notice": notice,
        "moving": [], "before": {"libnccl2": "hold"}, "installed": {"libnccl2": "2.26.2-1+cuda12.8"},
        "status": {"libnccl2": "installed"}})
    events = [driver, apt, nccl]
    raw = RawResults()
    for e in events:
        raw(e)
    report = build_report(build_result(events, rc=0, status="successful", check=True), raw)
    assert sorted((i.component, i.kind, i.message) for i in report.items) == [
        ("nvidia_driver", "dpkg", "dpkg was interrupted: nvidia-driver-570-open 570.172.08-0ubuntu1 unpacked, not "
                                  "configured (iU); nvidia-utils-570 570.133.20-0ubuntu1 half-installed, reinstall "
                                  "required (iHR); converge recovers it (`dpkg --configure -a`, then the pinned "
                                  "install)"),
        ("nvidia_driver", "package", "libnvidia-compute-570: 570.133.20-0ubuntu1 installed, 570.172.08-0ubuntu1 "
                                     "locked; held"),
        ("nvidia_driver", "package", "nvidia-driver-570-open: 570.172.08-0ubuntu1 unpacked (iU), "
                                     "570.172.08-0ubuntu1 locked; not held"),
        ("nvidia_driver", "package", "nvidia-utils-570: 570.133.20-0ubuntu1 half-installed (iHR), "
                                     "570.172.08-0ubuntu1 locked; not held"),
        # No role names it: the host's, not NCCL's (whose read listed it first among the rest); no drain for it.
        ("site", "dpkg", "dpkg was interrupted: libfoo1 1.0 half-configured (iF); converge recovers it "
                         "(`dpkg --configure -a`, then the pinned install)"),
    ]
    assert report.needs_drain("gpu-0")
    assert [i.disruptive for i in report.items if i.component == "site"] == [False]
