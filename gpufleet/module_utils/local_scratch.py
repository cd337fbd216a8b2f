"""Planning node-local NVMe scratch from ``lsblk --json``: which drives, what they hold, what to run.

The one copy of the planning rules, shared by gpufleet (tests, ``gpufleet.module_utils``) and the ``local_scratch``
Ansible module (``ansible/module_utils/gpufleet_local_scratch.py`` links here). Standard library only.

Input is what ``lsblk --json --bytes -o`` :data:`LSBLK_COLUMNS` prints (util-linux 2.37 and later: ``mountpoints`` is
an array, ``[null]`` when unmounted; ``size`` an integer with ``--bytes``; empty columns are ``null``; partitions,
md arrays and device-mapper devices nested under ``children``).

Rules:

- The scratch is an XFS file system labelled ``label`` on one drive, or on an md RAID 0 (``/dev/md/<md_name>``)
  over two or more. It is *ours* when lsblk shows that file system (type ``raid0`` or ``disk``, fstype ``xfs``,
  that label): then nothing is created, and the mdadm.conf line and fstab source come from lsblk's UUIDs.
- Listed drives (``devices``) must be whole disks that hold nothing: no file system or other signature (LVM, a
  RAID member), no partition table, nothing mounted. Otherwise the plan is refused, naming each drive and what it
  holds, unless ``force`` (the drives are wiped with ``wipefs --all``); a mounted drive, or one under an active
  array or device-mapper device, is refused even then (mdadm cannot take a busy device).
- No drives listed: every NVMe disk that holds nothing (the boot drive and anything in use are left alone and
  reported as skipped); the drives of an existing scratch file system when there is one.
"""

from __future__ import annotations

import json
from typing import Any

#: The lsblk columns the plan reads (pass them to ``lsblk --json --bytes -o``).
LSBLK_COLUMNS = "NAME,PATH,TYPE,FSTYPE,LABEL,UUID,PTTYPE,MOUNTPOINTS,SIZE,MODEL"
#: md's RAID 0 device type as lsblk prints it.
RAID0 = "raid0"
#: Member signature of an md array (blkid).
RAID_MEMBER = "linux_raid_member"


class LsblkError(ValueError):
    """lsblk's output is not the JSON this module reads."""


def parse_lsblk(text: str) -> list[dict[str, Any]]:
    """The ``blockdevices`` list of ``lsblk --json`` output; LsblkError when it is not that."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise LsblkError(f"not JSON: {e}") from None
    devs = data.get("blockdevices") if isinstance(data, dict) else None
    if not isinstance(devs, list):
        raise LsblkError("no 'blockdevices' list (expected the output of lsblk --json)")
    for d in _walk(devs):
        missing = [k for k in ("name", "type") if not isinstance(d.get(k), str)]
        if missing:
            raise LsblkError(f"a device without {', '.join(missing)}: {json.dumps(d)[:200]}")
    return devs


def _walk(devs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for d in devs:
        if isinstance(d, dict):
            out.append(d)
            out.extend(_walk(d.get("children") or []))
    return out


def path_of(dev: dict[str, Any]) -> str:
    return str(dev.get("path") or f"/dev/{dev['name']}")


def mounts_of(dev: dict[str, Any]) -> list[str]:
    """Where a device or anything on it is mounted (lsblk 2.37+ ``mountpoints``; 2.36's ``mountpoint`` too)."""
    own = dev.get("mountpoints")
    points = [p for p in (own if isinstance(own, list) else [dev.get("mountpoint")]) if p]
    return points + [p for c in dev.get("children") or [] for p in mounts_of(c)]


def _is_ours(dev: dict[str, Any], label: str) -> bool:
    return dev.get("fstype") == "xfs" and dev.get("label") == label and dev.get("type") in (RAID0, "disk")


def _our_array(dev: dict[str, Any], label: str) -> dict[str, Any] | None:
    """The scratch file system on this disk: the disk itself, or the RAID 0 it is a member of."""
    if _is_ours(dev, label):
        return dev
    if dev.get("fstype") == RAID_MEMBER:
        children: list[dict[str, Any]] = dev.get("children") or []
        for c in children:
            if _is_ours(c, label):
                return c
    return None


def holds(dev: dict[str, Any]) -> list[str]:
    """What a whole disk holds, in words (empty: nothing, it may be used)."""
    out = []
    children = [c for c in dev.get("children") or [] if isinstance(c, dict)]
    parts = [c for c in children if c.get("type") == "part"]
    fstype = dev.get("fstype")
    if fstype == RAID_MEMBER:
        arrays = [c for c in children if c.get("type", "").startswith("raid") or c.get("type") == "linear"]
        name = dev.get("label") or "unnamed"
        if arrays:
            out.append(f"a member of the active RAID {path_of(arrays[0])} ({arrays[0]['type']}, name {name})")
        else:
            out.append(f"a RAID member signature (array name {name}, not assembled)")
    elif fstype:
        label = f", label {dev['label']}" if dev.get("label") else ""
        out.append(f"a file system ({fstype}{label})")
    if dev.get("pttype"):
        n = len(parts)
        out.append(f"a {dev['pttype']} partition table ({n} partition{'' if n == 1 else 's'})")
    others = [c for c in children if c.get("type") not in ("part",) and fstype != RAID_MEMBER]
    out.extend(f"{path_of(c)} ({c.get('type')})" for c in others)
    mounted = mounts_of(dev)
    if mounted:
        out.append(f"mounted at {', '.join(mounted)}")
    return out


def _busy(dev: dict[str, Any]) -> bool:
    """Mounted, or under an active array or device-mapper device: wiping cannot free it."""
    return bool(mounts_of(dev)) or any(c.get("type") != "part" for c in dev.get("children") or [])


def mdadm_uuid(blkid_uuid: str) -> str:
    """blkid's array UUID (``9f0c4a2e-51b3-7d68-a4c2-3e1f0b7d9a85``) as mdadm writes it (``9f0c4a2e:51b37d68:...``)."""
    hexs = blkid_uuid.replace("-", "").replace(":", "")
    return ":".join(hexs[i:i + 8] for i in range(0, 32, 8))


def plan(devs: list[dict[str, Any]], devices: list[str], *, force: bool = False, raid0: bool = True,
         md_name: str = "scratch", label: str = "scratch", variable: str = "local_scratch_devices") -> dict[str, Any]:
    """What to do for the scratch file system. Keys:

    ``error`` (the refusal message, or None), ``devices`` (the drives used), ``skipped`` ({path: what it holds},
    drives left alone when none are listed), ``refused`` ({path: what it holds}), ``present`` (the scratch file
    system exists), ``target`` (the device carrying it), ``commands`` (argv lists, in order; empty when present),
    ``array_line`` (mdadm.conf's ARRAY line, None without md or before it exists), ``fstab_src`` (``UUID=...``,
    None before the file system exists).
    """
    disks = {path_of(d): d for d in devs if d.get("type") == "disk"}
    by_path = {path_of(d): d for d in _walk(devs)}
    result: dict[str, Any] = {"error": None, "devices": [], "skipped": {}, "refused": {}, "present": False,
                              "target": None, "commands": [], "array_line": None, "fstab_src": None}
    ours = {p: a for p, d in disks.items() if (a := _our_array(d, label)) is not None}

    if devices:
        unknown = [p for p in devices if p not in by_path]
        not_disk = [p for p in devices if p in by_path and p not in disks]
        if unknown or not_disk:
            what = ([f"{p} not found (lsblk lists {', '.join(sorted(disks)) or 'no disks'})" for p in unknown]
                    + [f"{p} is a {by_path[p]['type']}, not a whole disk" for p in not_disk])
            result["error"] = (f"local_scratch: {variable}={devices}: {'; '.join(what)}. Fix: list whole-disk "
                               f"device paths (lsblk -d -o PATH,MODEL,SIZE shows them) in {variable}.")
            return result
        chosen = list(dict.fromkeys(devices))
    elif ours:
        chosen = sorted(ours)
    else:
        chosen = []
        for p, d in sorted(disks.items()):
            if not d["name"].startswith("nvme"):
                continue
            h = holds(d)
            if h:
                result["skipped"][p] = "; ".join(h)
            else:
                chosen.append(p)
        if not chosen:
            skipped = "; ".join(f"{p}: {h}" for p, h in result["skipped"].items()) or "no NVMe disk at all"
            result["error"] = (f"local_scratch: {variable}=[] (every empty NVMe disk): none is empty ({skipped}). "
                               f"Fix: list the drives to use in {variable} (local_scratch_force: true wipes them), "
                               "or leave storage.local_nvme out of this pool's stack.")
            return result
    result["devices"] = chosen

    if not raid0 and len(chosen) > 1:
        result["error"] = (f"local_scratch: {variable}={chosen} with local_scratch_raid0=false: without RAID 0 "
                           f"the scratch is one drive. Fix: list one drive in {variable}, or set raid0: true.")
        return result

    # lsblk repeats an array under each member: one array is one device path
    arrays = {path_of(a): a for p, a in ours.items() if p in chosen}
    if arrays:
        members = sorted(p for p, a in ours.items() if path_of(a) in arrays)
        if len(arrays) > 1 or members != sorted(chosen):
            result["error"] = (f"local_scratch: {variable}={chosen}: the scratch file system (label {label}) already "
                               f"spans {members}. A RAID 0 cannot be grown or shrunk in place. Fix: set {variable} "
                               f"to {members}, or stop and wipe the array yourself (mdadm --stop, wipefs --all) "
                               "to rebuild it over the new set (its data is lost).")
            return result
        target = next(iter(arrays.values()))
        result.update(present=True, target=path_of(target))
        if target.get("uuid"):
            result["fstab_src"] = f"UUID={target['uuid']}"
        member = disks[members[0]]
        if target.get("type") == RAID0 and member.get("uuid"):
            result["array_line"] = (f"ARRAY /dev/md/{md_name} metadata=1.2 "
                                    f"UUID={mdadm_uuid(str(member['uuid']))}")
        return result

    refused = {p: h for p in chosen if (h := holds(disks[p]))}
    busy = [p for p in refused if _busy(disks[p])]
    result["refused"] = {p: "; ".join(h) for p, h in refused.items()}
    if refused and (not force or busy):
        listed = "; ".join(f"{p} holds {', '.join(h)}" for p, h in refused.items())
        fix = (f"unmount or stop what uses {', '.join(busy)} first (a mounted or busy drive is refused even with "
               "local_scratch_force)" if busy else
               f"remove them from {variable}, wipe them yourself (wipefs --all DEVICE), or set "
               "local_scratch_force: true to wipe them (their data is lost)")
        result["error"] = f"local_scratch: {variable}={chosen}: {listed}. Fix: {fix}. Nothing was changed."
        return result

    commands: list[list[str]] = [["wipefs", "--all", p] for p in refused]
    if len(chosen) > 1:
        target_path = f"/dev/md/{md_name}"
        commands.append(["mdadm", "--create", target_path, "--run", "--level=0", "--metadata=1.2",
                         f"--name={md_name}", f"--raid-devices={len(chosen)}", *chosen])
    else:
        target_path = chosen[0]
    # mkfs.xfs reads the stripe unit and width from md itself (no su/sw needed on md RAID 0).
    commands.append(["mkfs.xfs", "-L", label, target_path])
    result.update(target=target_path, commands=commands)
    return result
