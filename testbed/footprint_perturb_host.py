"""The node's half of the footprint agreement test (molecule/shared/agree.yml): expand, apply and undo perturbations.

Run as root on a node by molecule/shared/action_plugins/footprint_agreement.py (``python3 -c <this file> <op>
<json>``; standard library only, it prints one JSON object). ``probe_each`` runs the whole probe sequence in one
process: the probe is the host_footprint module as the controller built it (AnsiballZ, arguments inside), sent
once and run here after each perturbation. What each perturbation does, and how it is undone so
that the node's footprint is as before (content, inode, modification times of the entry and of its directory):
- ``append``: a comment line at the end of a configuration file (undone: the bytes written back, times restored);
- ``remove``: the entry renamed aside in its own directory (undone: renamed back, the directory's times restored);
- ``replace``: the final target of a link renamed aside and an empty entry of the same type put in its place (the
  toolkit directory at the end of ``/usr/local/cuda``'s chain);
- ``mode``: a directory's group-write bit flipped;
- ``topology``: every NVLink count in the simulator's ``topo -m`` matrices halved (a lost NVLink).
What is undone lives in a state file until ``restore``, so a batch applied by one call is undone by another.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

STATE = "/var/tmp/gpufleet-agree/state.json"
SUFFIX = ".gpufleet-agree"
#: The simulator's ``topo -m`` matrices (testbed/simulator/gpusim.py TOPO_DIR), one per board.
TOPO_GLOB = "/usr/lib/gpusim/topo/*.txt"
#: Never perturbed: the kernel's trees, device nodes, dpkg's and the footprint's own records, the test's tools.
NEVER = ("/proc/", "/sys/", "/dev/", "/var/lib/dpkg/", "/var/lib/gpufleet/", "/var/tmp/gpufleet-agree",
         "/usr/lib/python3", "/usr/bin/python3", "/etc/passwd", "/etc/group", "/etc/shadow", "/etc/sudoers",
         "/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu/libc.", "/usr/lib/x86_64-linux-gnu/ld-linux")
#: A configuration tree: a file there gets a comment appended, elsewhere (programs, libraries) it is removed.
CONFIG = ("/etc/", "/run/", "/var/", "/opt/", "/srv/")
#: Per role and kind, and in all: a bounded, deterministic sample (the order is the sha256 of role and path).
PER_KIND = {"path": 6, "program": 3, "package": 4, "link": 3}
MATCHES_PER_PATTERN = 3


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _never(path: str) -> bool:
    return path.startswith(NEVER) or path.endswith(SUFFIX)


def _times(path: str) -> list[int]:
    st = os.lstat(path)
    return [st.st_atime_ns, st.st_mtime_ns]


def _packages(component: str) -> list[str]:
    """The packages a component pins (pinned_packages writes /etc/apt/preferences.d/gpufleet-<component>.pref)."""
    names: list[str] = []
    for pref in sorted(glob.glob(f"/etc/apt/preferences.d/gpufleet-{component}.pref")):
        with open(pref, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Package:"):
                    names += [n for n in line.split(":", 1)[1].split() if re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", n)]
    return sorted(set(names))


def _package_files(package: str) -> list[str]:
    out = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True, check=False)
    return [p for p in out.stdout.splitlines() if p.startswith("/") and os.path.isfile(p) and not os.path.islink(p)]


def _entry(role: str, kind: str, path: str) -> dict[str, Any] | str:
    """One perturbation for a path that exists, or why none."""
    if _never(path):
        return "not perturbed (the kernel's, dpkg's or the test's own)"
    try:
        st = os.lstat(path)
    except OSError:
        return "absent"
    if stat.S_ISLNK(st.st_mode):
        final = os.path.realpath(path)
        if _never(final) or not os.path.lexists(final) or os.path.islink(final):
            return f"link to {final}: not perturbed"
        return {"role": role, "kind": "link", "path": final, "via": path, "op": "replace"}
    if stat.S_ISREG(st.st_mode):
        op = "append" if kind == "path" and path.startswith(CONFIG) else "remove"
        return {"role": role, "kind": kind, "path": path, "op": op}
    if stat.S_ISDIR(st.st_mode):
        return {"role": role, "kind": kind, "path": path, "op": "mode"}
    return "a device node, socket or pipe: not perturbed"


def expand(args: dict[str, Any]) -> dict[str, Any]:
    """Candidates (role, kind, pattern) -> perturbations on this node, bounded, and what was left out and why."""
    per_kind = {**PER_KIND, **(args.get("per_kind") or {})}
    limit = int(args.get("limit", 24))
    pool: dict[tuple[str, str], list[dict[str, Any]]] = {}
    skipped: list[dict[str, str]] = []
    for c in args.get("candidates") or []:
        role, kind, pattern = str(c["role"]), str(c["kind"]), str(c["pattern"])
        if kind == "program":
            found = pattern if pattern.startswith("/") else shutil.which(
                pattern, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            paths = [found] if found and os.path.lexists(found) else []
        elif kind == "package":
            paths = [p for pkg in _packages(pattern) for p in _package_files(pkg)]
            if not paths:
                skipped.append({"role": role, "kind": kind, "pattern": pattern,
                                "why": "no pinned package of this component is installed"})
                continue
        else:
            matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
            paths = sorted(matches, key=lambda p: _key(role, p))[:MATCHES_PER_PATTERN]
        if not paths:
            skipped.append({"role": role, "kind": kind, "pattern": pattern, "why": "absent on this node"})
            continue
        for path in paths:
            e = _entry(role, kind, path)
            if isinstance(e, str):
                if e != "absent":
                    skipped.append({"role": role, "kind": kind, "pattern": path, "why": e})
                continue
            pool.setdefault((role, str(e["kind"])), []).append(e)
    ranked: list[tuple[int, str, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for (role, kind), items in sorted(pool.items()):
        n = 0
        for e in sorted(items, key=lambda e: _key(role, e["path"])):
            if e["path"] in seen or n >= per_kind.get(kind, 3):
                continue
            seen.add(e["path"])
            ranked.append((n, role, kind, e))
            n += 1
    # Interleaved (the first of each role and kind, then the second...) so that the limit keeps a bit of each.
    chosen = [e for _n, _r, _k, e in sorted(ranked, key=lambda t: t[:3])]
    topo = sorted(glob.glob(TOPO_GLOB))
    if not topo:
        skipped.append({"role": "*", "kind": "topology", "pattern": TOPO_GLOB, "why": "no GPU simulator on this node"})
    elif not any(re.search(rb"\bNV\d+\b", Path(t).read_bytes()) for t in topo):
        skipped.append({"role": "*", "kind": "topology", "pattern": TOPO_GLOB, "why": "no NVLink in the matrix"})
    else:
        chosen.insert(0, {"role": "*", "kind": "topology", "path": TOPO_GLOB, "op": "topology"})
    for i, e in enumerate(chosen):
        e["id"] = i
    return {"perturbations": chosen[:limit], "skipped": skipped,
            "left_out": [f"{e['kind']} {e['path']}" for e in chosen[limit:]]}


def _load() -> list[dict[str, Any]]:
    try:
        with open(STATE, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return []
    return list(data) if isinstance(data, list) else []


def _save(undo: list[dict[str, Any]]) -> None:
    os.makedirs(os.path.dirname(STATE), mode=0o700, exist_ok=True)
    with open(STATE, "w", encoding="utf-8") as f:
        json.dump(undo, f)


def _apply_one(p: dict[str, Any]) -> dict[str, Any]:
    path, op = str(p["path"]), str(p["op"])
    if op == "topology":
        saved = []
        for t in sorted(glob.glob(TOPO_GLOB)):
            with open(t, "rb") as f:
                data = f.read()
            saved.append({"path": t, "data": data.decode("latin-1"), "times": _times(t)})
            new = re.sub(rb"\bNV(\d+)\b", lambda m: b"NV%d" % max(1, int(m.group(1)) // 2), data)
            with open(t, "wb") as f:
                f.write(new)
        return {"op": op, "files": saved}
    parent = os.path.dirname(path)
    undo: dict[str, Any] = {"op": op, "path": path, "parent": parent, "parent_times": _times(parent)}
    if op == "append":
        with open(path, "rb") as f:
            undo["data"] = f.read().decode("latin-1")
        undo["times"] = _times(path)
        with open(path, "ab") as f:
            f.write(b"\n# gpufleet footprint agreement test\n")
    elif op == "mode":
        undo["mode"] = stat.S_IMODE(os.lstat(path).st_mode)
        os.chmod(path, undo["mode"] ^ 0o020)
    elif op in ("remove", "replace"):
        aside = os.path.join(parent, "." + os.path.basename(path) + SUFFIX)
        is_dir = os.path.isdir(path)
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        os.rename(path, aside)  # the same directory: no copy, the inode stays
        undo["aside"] = aside
        if op == "replace":
            try:
                if is_dir:
                    os.mkdir(path, mode)
                else:
                    with open(path, "wb"):
                        pass
                    os.chmod(path, mode)
            except OSError:
                os.rename(aside, path)  # as it was: no undo is recorded for a perturbation that failed
                raise
    else:
        raise ValueError(f"unknown op {op}")
    return undo


def _undo_one(u: dict[str, Any]) -> None:
    if u["op"] == "topology":
        for f in u["files"]:
            with open(f["path"], "wb") as out:
                out.write(f["data"].encode("latin-1"))
            os.utime(f["path"], ns=tuple(f["times"]))
        return
    path = u["path"]
    if u["op"] == "append":
        with open(path, "wb") as f:  # the same inode, the same bytes
            f.write(u["data"].encode("latin-1"))
        os.utime(path, ns=tuple(u["times"]))
    elif u["op"] == "mode":
        os.chmod(path, u["mode"])
    else:
        if u["op"] == "replace" and os.path.lexists(path):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        os.rename(u["aside"], path)
    os.utime(u["parent"], ns=tuple(u["parent_times"]), follow_symlinks=False)


def restore() -> dict[str, Any]:
    failed = []
    undo = _load()
    for u in reversed(undo):
        try:
            _undo_one(u)
        except OSError as e:
            failed.append(f"{u.get('path', u['op'])}: {e}")
    if os.path.exists(STATE):
        os.unlink(STATE)
    return {"restored": len(undo) - len(failed), "failed": failed}


def apply(args: dict[str, Any]) -> dict[str, Any]:
    """Undo what is pending (a previous call's perturbations), then apply these ones (kept until restore)."""
    before = restore()
    undo: list[dict[str, Any]] = []
    applied, failed = [], []
    for p in args.get("perturbations") or []:
        try:
            undo.append(_apply_one(p))
            applied.append(p["id"])
        except OSError as e:  # an overlay directory that cannot be renamed (EXDEV), a read-only file
            failed.append({"id": p["id"], "why": f"{type(e).__name__}: {e}"})
        _save(undo)
    return {"applied": applied, "failed": failed, "restore_failed": before["failed"]}


def _ask(probe: str) -> dict[str, Any]:
    """The probe's answer: the host_footprint module (as the controller built it, arguments inside) run here."""
    out = subprocess.run([sys.executable, probe], capture_output=True, text=True, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    try:
        res = dict(json.loads(lines[-1]))
    except (ValueError, IndexError):
        return {"failed": True, "msg": f"rc {out.returncode}: {out.stdout[-300:]} {out.stderr[-500:]}"}
    return res


def probe_each(args: dict[str, Any]) -> dict[str, Any]:
    """Expand the candidates, then for each perturbation: apply, ask the probe, undo; then the other probes once.

    One process on the node for the whole sequence: a module run costs its own work only, not a connection's.
    """
    plan = expand(args)
    probes = dict(args["probes"])
    answers: list[dict[str, Any]] = []
    skipped = list(plan["skipped"])
    for p in plan["perturbations"]:
        applied = apply({"perturbations": [p]})
        if p["id"] not in applied["applied"]:
            skipped.append({**p, "why": "; ".join(f["why"] for f in applied["failed"])})
            continue
        seen = _ask(probes["state"])
        if seen.get("failed"):
            restore()
            return {"failed": True, "msg": f"the probe failed after {p['op']} {p['path']}: {seen.get('msg')}"}
        answers.append({**p, "converged": bool(seen.get("converged")), "reason": str(seen.get("reason", ""))})
    undone = restore()
    # Asked again only on request: each probe costs seconds of the node's time (tests/test_footprint_agreement.py).
    after = _ask(probes["state"]) if args.get("check_undo") else {"reason": "not asked"}
    others = {name: _ask(path) for name, path in probes.items() if name != "state"}
    return {"perturbations": answers, "skipped": skipped, "left_out": plan["left_out"],
            "not_restored": undone["failed"], "converged_after": bool(after.get("converged")),
            "reason_after": str(after.get("reason", after.get("msg", ""))),
            "others": {k: {"converged": bool(v.get("converged")), "reason": str(v.get("reason", v.get("msg", "")))}
                       for k, v in others.items()}}


def main(argv: list[str]) -> int:
    op, args = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    ops = {"expand": expand, "apply": apply, "probe_each": probe_each}
    result = ops[op](args) if op in ops else restore()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
