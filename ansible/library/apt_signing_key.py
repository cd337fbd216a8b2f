#!/usr/bin/python
"""Ansible module: install an APT repository signing key only when its fingerprint is the expected one."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: apt_signing_key
short_description: Fetch a repository signing key, check its fingerprint, install it for signed-by
description:
  - Fetches an OpenPGP public key (armored or binary) from O(url) (https, http or file), computes the
    fingerprint of its primary key in Python (no gpg needed on the host) and compares it with O(fingerprint).
  - A key fetched from the repository it signs proves nothing by itself; only the fingerprint check, against a
    value the operator holds (gpufleet's version lock), does. On a mismatch the module fails naming both
    fingerprints and writes nothing.
  - Writes O(dest) (atomically) only when its content differs. Supports check mode (the key is fetched and
    checked, nothing is written) and diff mode.
options:
  url:
    description: Where the key is published.
    type: str
    required: true
  dest:
    description: Keyring file to write (referenced by C(signed-by=) in the source).
    type: path
    required: true
  fingerprint:
    description: Expected fingerprint of the primary key (hex; spaces allowed, case ignored).
    type: str
    required: true
  mode:
    description: Octal mode of O(dest).
    type: str
    default: "0644"
  timeout:
    description: Seconds to wait for the download.
    type: int
    default: 30
author: gpufleet
"""

EXAMPLES = r"""
- name: Install the CUDA repository key
  apt_signing_key:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/3bf863cc.pub
    dest: /etc/apt/keyrings/cuda-archive-keyring.asc
    fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys found in the downloaded data.
  returned: always
  type: list
  elements: str
"""

import base64
import hashlib
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

#: Largest key file accepted (NVIDIA's is ~1.7 KB; a keyring with many subkeys a few tens of KB).
MAX_KEY_BYTES = 1 << 20
_PUBLIC_KEY, _PUBLIC_SUBKEY = 6, 14


def _dearmor(data: bytes) -> bytes:
    text = data.decode("ascii", errors="strict")
    m = re.search(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", text, re.S)
    if m is None:
        raise ValueError("no PGP PUBLIC KEY BLOCK in the armored data")
    body = m.group(1)
    # Armor headers ("Version: ...") end at the first empty line; a header-less block starts with base64.
    if re.search(r"^\s*$", body, re.M) and re.match(r"[A-Za-z-]+: ", body):
        body = re.split(r"\r?\n\s*\r?\n", body, maxsplit=1)[1]
    lines = [ln.strip() for ln in body.splitlines() if ln.strip() and not ln.startswith("=")]
    return base64.b64decode("".join(lines), validate=True)


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 4880 section 4.2: old and new packet formats)."""
    out = []
    i = 0
    while i < len(data):
        first = data[i]
        if not first & 0x80:
            raise ValueError(f"not an OpenPGP packet at byte {i}")
        if first & 0x40:  # new format
            tag = first & 0x3F
            o1 = data[i + 1]
            if o1 < 192:
                length, i = o1, i + 2
            elif o1 < 224:
                length, i = ((o1 - 192) << 8) + data[i + 2] + 192, i + 3
            elif o1 == 255:
                length, i = int.from_bytes(data[i + 2:i + 6], "big"), i + 6
            else:
                raise ValueError("partial body lengths do not occur in key packets")
        else:  # old format
            tag = (first >> 2) & 0x0F
            kind = first & 0x03
            if kind == 3:
                raise ValueError("indeterminate packet length in a key")
            size = (1, 2, 4)[kind]
            length, i = int.from_bytes(data[i + 1:i + 1 + size], "big"), i + 1 + size
        if i + length > len(data):
            raise ValueError("truncated OpenPGP packet")
        out.append((tag, data[i:i + length]))
        i += length
    return out


def fingerprints(data: bytes) -> list[str]:
    """Upper-case hex fingerprints of the primary keys in ``data`` (armored or binary)."""
    raw = _dearmor(data) if data.lstrip().startswith(b"-----BEGIN") else data
    out = []
    for tag, body in _packets(raw):
        if tag != _PUBLIC_KEY or not body:
            continue
        version = body[0]
        if version == 4:
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()
        elif version in (5, 6):
            prefix = b"\x9a" if version == 5 else b"\x9b"
            digest = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest()
        else:
            raise ValueError(f"unsupported OpenPGP key version {version}")
        out.append(digest.upper())
    if not out:
        raise ValueError("no public key packet found")
    return out


def normalise(fingerprint: str) -> str:
    return re.sub(r"\s+", "", fingerprint).upper()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "required": True},
            "mode": {"type": "str", "default": "0644"},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    expected = normalise(p["fingerprint"])
    if not re.fullmatch(r"[0-9A-F]{40}|[0-9A-F]{64}", expected):
        module.fail_json(msg=f"fingerprint {p['fingerprint']!r} is not 40 (v4) or 64 (v5/v6) hex digits")
    try:
        with open_url(p["url"], timeout=p["timeout"]) as resp:
            data = resp.read(MAX_KEY_BYTES + 1)
    except Exception as e:
        module.fail_json(msg=f"cannot fetch the signing key from {p['url']}: {e}")
    if len(data) > MAX_KEY_BYTES:
        module.fail_json(msg=f"the signing key at {p['url']} is larger than {MAX_KEY_BYTES} bytes")
    try:
        found = fingerprints(data)
    except (ValueError, UnicodeDecodeError, IndexError) as e:
        module.fail_json(msg=f"the data at {p['url']} is not an OpenPGP public key: {e}")
    if expected not in found:
        module.fail_json(
            msg=(f"the signing key at {p['url']} has fingerprint {', '.join(found)}, the lock expects "
                 f"{expected}: refusing to trust it (a changed key, a mirror serving another key, or an "
                 f"outdated lock)"),
            fingerprints=found, expected=expected)
    dest = p["dest"]
    try:
        with open(dest, "rb") as f:
            current: bytes | None = f.read()
    except FileNotFoundError:
        current = None
    mode = int(p["mode"], 8)
    content_changed = current != data
    result: dict[str, object] = {"fingerprints": found, "dest": dest}
    if module._diff:
        result["diff"] = {"before_header": dest, "after_header": dest,
                          "before": (current or b"").decode("ascii", "replace"),
                          "after": data.decode("ascii", "replace")}
    if content_changed and not module.check_mode:
        directory = os.path.dirname(dest) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".apt_signing_key.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.chown(tmp, 0, 0)
            os.replace(tmp, dest)
        except OSError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            module.fail_json(msg=f"cannot write {dest}: {e}")
    attrs_changed = False
    if current is not None and not content_changed:
        st = os.stat(dest)
        if (st.st_mode & 0o7777) != mode or st.st_uid != 0 or st.st_gid != 0:
            attrs_changed = True
            if not module.check_mode:
                os.chmod(dest, mode)
                os.chown(dest, 0, 0)
    module.exit_json(changed=content_changed or attrs_changed, **result)


if __name__ == "__main__":
    main()
