"""gpufleet drift names a missing Lustre mount: the lustre_client role's ansible.posix.mount loop, as the events
report it in a check-mode run (item events, then the task's result with every item's), becomes one finding per
mount that would change, named by its path, source and options."""

from __future__ import annotations

from typing import Any

from gpufleet.ansible_run import build_result
from gpufleet.drift.report import RawResults, build_report, render_text

MGS = "10.0.0.5@o2ib:10.0.0.6@o2ib"


def _mount(path: str, subdir: str, opts: str, changed: bool, state: str) -> dict[str, Any]:
    # ansible.posix.mount returns its arguments (name, src, fstype, opts, dump, passno, fstab, boot) and "changed".
    args = {"name": path, "src": f"{MGS}:/ai{subdir}", "fstype": "lustre", "opts": opts, "dump": "0",
            "passno": "0", "fstab": "/etc/fstab", "boot": "yes"}
    return {**args, "changed": changed, "item": {"mount_path": path, "volume": subdir.strip("/")},
            "ansible_loop_var": "item",
            "invocation": {"module_args": {**args, "path": path, "state": state, "backup": False}}}


def _events(state: str) -> list[dict[str, Any]]:
    # The checkpoints entry was removed from /etc/fstab by hand; the datasets entry is as the role writes it.
    items = [_mount("/lustre/datasets", "/datasets", "_netdev,flock,ro", False, state),
             _mount("/lustre/checkpoints", "/checkpoints", "_netdev,flock", True, state)]
    data = {"host": "gpu-a-0", "play": "GPU nodes - Lustre client", "role": "lustre_client",
            "task": "Mount the Lustre volumes", "task_uuid": "uuid-mount", "resolved_action": "ansible.posix.mount",
            "task_path": "/repo/roles/lustre_client/tasks/main.yml:50"}
    item_events = [{"event": "runner_item_on_ok", "event_data": {**data, "res": r}} for r in items]
    final = {"event": "runner_on_ok", "event_data": {**data, "res": {
        "changed": True, "msg": "All items completed", "results": items}}}
    return [*item_events, final]


def _report(state: str, raw: bool = True) -> Any:
    events = _events(state)
    sink = RawResults()
    for e in events:
        sink(e)
    return build_report(build_result(events, rc=0, status="successful", check=True), sink if raw else None)


def test_a_missing_fstab_entry_is_named_by_its_mount() -> None:
    report = _report("present")
    assert [(i.component, i.kind, i.line()) for i in report.items] == [(
        "lustre_client", "mount",
        f"gpu-a-0 lustre_client: Lustre mount /lustre/checkpoints ({MGS}:/ai/checkpoints, _netdev,flock): "
        "missing from /etc/fstab or different there")]
    assert report.exit_code == 2 and not report.needs_drain("gpu-a-0")
    assert "Lustre mount /lustre/checkpoints" in render_text(report)


def test_a_mount_absent_where_mounts_apply_is_named() -> None:
    [item] = _report("mounted").items
    assert item.message == (f"Lustre mount /lustre/checkpoints ({MGS}:/ai/checkpoints, _netdev,flock): "
                            "not mounted, or missing from /etc/fstab or different there")


def test_without_the_full_results_the_mount_is_still_named() -> None:
    # Replayed recordings keep the trimmed result only (no invocation, so no state): the path still names it.
    [item] = _report("present", raw=False).items
    assert item.message.startswith("Lustre mount /lustre/checkpoints (")
