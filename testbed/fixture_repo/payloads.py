"""What each fixture package installs: stand-in programs, version files, systemd units.

Hosts get the GPU simulator only through these packages. Everything here runs on Debian 12 with
coreutils, systemd and python3; maintainer scripts do nothing beyond ``systemctl daemon-reload``.

Sources for formats (not copied code): ``nvcc --version`` layout and per-release nvcc build numbers
(CUDA toolkit release notes, "CUDA Toolkit Major Component Versions"); ``version.json`` layout as in
``/usr/local/cuda-X.Y/version.json``; ``nccl.h``/``cudnn_version.h`` version macros as their headers
define them; unit names/ExecStart as NVIDIA ships them (nvidia-persistenced's
init/systemd/nvidia-persistenced.service.template, fabric manager's nvidia-fabricmanager.service,
DCGM's nvidia-dcgm.service); ``nvidia-ctk runtime configure`` keys as the toolkit writes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from testbed.fixture_repo.catalogue import Package
from testbed.fixture_repo.simulator import LIBDIR, SIMULATOR_DIR, topo_files

EXEC = 0o755
DATA = 0o644


@dataclass(frozen=True)
class Payload:
    files: dict[str, tuple[bytes, int]]
    postinst: str | None = None
    conffiles: tuple[str, ...] = ()


DAEMON_RELOAD = """#!/bin/sh
set -e
if [ "$1" = "configure" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload || true
fi
exit 0
"""


def _wrapper(script: str, *args: str) -> bytes:
    extra = "".join(f" {a}" for a in args)
    return f'#!/bin/sh\nexec python3 {LIBDIR}/{script}{extra} "$@"\n'.encode()


def _sim(name: str) -> tuple[bytes, int]:
    return (SIMULATOR_DIR / name).read_bytes(), DATA


PERSISTENCED_UNIT = """[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
PIDFile=/run/nvidia-persistenced/nvidia-persistenced.pid
Restart=always
ExecStart=/usr/bin/nvidia-persistenced --verbose
ExecStopPost=/bin/rm -rf /run/nvidia-persistenced

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER_UNIT = """[Unit]
Description=NVIDIA fabric manager service
After=network-online.target
Requires=network-online.target

[Service]
User=root
PrivateTmp=false
Type=forking
PIDFile=/run/nvidia-fabricmanager/nv-fabricmanager.pid
ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg
LimitCORE=infinity

[Install]
WantedBy=multi-user.target
"""

FABRICMANAGER_CFG = """# NVIDIA Fabric Manager configuration (gpufleet fixture stand-in)
LOG_LEVEL=4
LOG_FILE_NAME=/var/log/fabricmanager.log
LOG_APPEND_TO_LOG=1
LOG_FILE_MAX_SIZE=1024
LOG_USE_SYSLOG=0
DAEMONIZE=1
BIND_INTERFACE_IP=127.0.0.1
STARTING_TCP_PORT=16000
FABRIC_MODE=0
FABRIC_MODE_RESTART=0
STATE_FILE_NAME=/var/tmp/fabricmanager.state
FM_CMD_BIND_INTERFACE=127.0.0.1
FM_CMD_PORT_NUMBER=6666
FM_STAY_RESIDENT_ON_FAILURES=0
ACCESS_LINK_FAILURE_MODE=0
TRUNK_LINK_FAILURE_MODE=0
NVSWITCH_FAILURE_MODE=0
ABORT_CUDA_JOBS_ON_FM_EXIT=1
TOPOLOGY_FILE_PATH=/usr/share/nvidia/nvswitch
"""

DCGM_UNIT = """[Unit]
Description=NVIDIA DCGM service
Conflicts=dcgm.service

[Service]
User=root
PrivateTmp=false

Environment="DCGM_HOME_DIR=/var/log/nvidia-dcgm"

ExecStart=/usr/bin/nv-hostengine -n --service-account nvidia-dcgm

Restart=on-abort

[Install]
WantedBy=multi-user.target
"""

HOSTENGINE = '''#!/usr/bin/python3
"""nv-hostengine stand-in: holds /run/nvidia-hostengine.pid while it runs (-n: stay in foreground)."""
import os, signal, sys, time

PID = "/run/nvidia-hostengine.pid"


def main() -> int:
    args = sys.argv[1:]
    if "--version" in args or "-v" in args:
        print("version: __VERSION__")
        return 0
    if "-n" not in args and os.fork() > 0:
        time.sleep(0.2)
        return 0
    with open(PID, "w") as f:
        f.write(f"{os.getpid()}\\n")

    def stop(*_a: object) -> None:
        try:
            os.unlink(PID)
        except OSError:
            pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print("Started host engine version __VERSION__ using socket path: /tmp/nv-hostengine", flush=True)
    while True:
        time.sleep(3600)


sys.exit(main())
'''

DCGMI = '''#!/usr/bin/python3
"""dcgmi stand-in: 'discovery -l' lists the GPUs nvidia-smi reports; needs nv-hostengine running."""
import os, subprocess, sys

LINE = "+--------+----------------------------------------------------------------------+"


def running() -> bool:
    try:
        with open("/run/nvidia-hostengine.pid") as f:
            os.kill(int(f.read().split()[0]), 0)
        return True
    except (OSError, ValueError, IndexError):
        return False


def cell(text: str) -> str:
    return f"| {text:<69}|"


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--version"] or args[:1] == ["-v"]:
        print("dcgmi  version: __VERSION__")
        return 0
    if args[:2] != ["discovery", "-l"]:
        print("gpufleet dcgmi stand-in supports: dcgmi discovery -l, dcgmi --version", file=sys.stderr)
        return 2
    if not running():
        print("Error: unable to establish a connection to the specified host: localhost")
        print("Error: Unable to connect to host engine. Host engine connection invalid/disconnected.")
        return 255
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,pci.bus_id,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout, end="")
        return out.returncode
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    print(f"{len(rows)} GPU{'s' if len(rows) != 1 else ''} found.")
    print(LINE)
    print("| GPU ID | Device Information                                                   |")
    print(LINE)
    for idx, name, bus, uuid in rows:
        print(f"| {idx:<7}" + cell(f"Name: {name}"))
        print("|        " + cell(f"PCI Bus ID: {bus}"))
        print("|        " + cell(f"Device UUID: {uuid}"))
        print(LINE)
    print("0 NvSwitches found.")
    print("+-----------+")
    print("| Switch ID |")
    print("+-----------+")
    print("+-----------+")
    return 0


sys.exit(main())
'''

NVIDIA_CTK = '''#!/usr/bin/python3
"""nvidia-ctk stand-in: --version and 'runtime configure --runtime=containerd|docker'."""
import argparse, json, os, sys, tomllib

VERSION = "__VERSION__"
CRI = 'plugins."io.containerd.grpc.v1.cri".containerd'


def info(msg: str) -> None:
    print(f"INFO[0000] {msg}", file=sys.stderr)


def dump_toml(data: dict, prefix: str = "") -> list[str]:
    def val(v: object) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return json.dumps(v)

    def key(k: str) -> str:
        return k if k.replace("_", "").replace("-", "").isalnum() else json.dumps(k)

    lines = [f"{key(k)} = {val(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for k, v in data.items():
        if isinstance(v, dict):
            name = f"{prefix}.{key(k)}" if prefix else key(k)
            lines += ["", f"[{name}]"] + dump_toml(v, name)
    return lines


def containerd(path: str, default: bool) -> None:
    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except FileNotFoundError:
        info("Config file does not exist; using empty config")
        cfg = {}
    cfg.setdefault("version", 2)
    plugins = cfg.setdefault("plugins", {})
    cri = plugins.setdefault("io.containerd.grpc.v1.cri", {}).setdefault("containerd", {})
    runtimes = cri.setdefault("runtimes", {})
    runtimes["nvidia"] = {
        "privileged_without_host_devices": False,
        "runtime_engine": "",
        "runtime_root": "",
        "runtime_type": "io.containerd.runc.v2",
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime"},
    }
    if default:
        cri["default_runtime_name"] = "nvidia"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write("\\n".join(dump_toml(cfg)).lstrip("\\n") + "\\n")
    info(f"Wrote updated config to {path}")
    info("It is recommended that containerd daemon be restarted.")


def docker(path: str, default: bool) -> None:
    try:
        with open(path) as f:
            cfg = json.load(f)
    except FileNotFoundError:
        info("Config file does not exist; using empty config")
        cfg = {}
    cfg.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    if default:
        cfg["default-runtime"] = "nvidia"
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=4)
        f.write("\\n")
    info(f"Wrote updated config to {path}")
    info("It is recommended that docker daemon be restarted.")


def main() -> int:
    if sys.argv[1:2] in (["--version"], ["-v"]):
        print(f"NVIDIA Container Toolkit CLI version {VERSION}")
        print("commit: 0000000000000000000000000000000000000000")
        return 0
    if sys.argv[1:3] != ["runtime", "configure"]:
        print("gpufleet nvidia-ctk stand-in supports: --version, runtime configure", file=sys.stderr)
        return 1
    p = argparse.ArgumentParser(prog="nvidia-ctk runtime configure")
    p.add_argument("--runtime", default="docker", choices=["docker", "containerd"])
    p.add_argument("--config")
    p.add_argument("--set-as-default", action="store_true")
    ns = p.parse_args(sys.argv[3:])
    if ns.runtime == "containerd":
        containerd(ns.config or "/etc/containerd/config.toml", ns.set_as_default)
    else:
        docker(ns.config or "/etc/docker/daemon.json", ns.set_as_default)
    return 0


sys.exit(main())
'''

CONTAINER_RUNTIME = """#!/bin/sh
# Stand-in for nvidia-container-runtime: there are no GPUs to inject, so behave as runc.
exec runc "$@"
"""

#: nvcc build per CUDA release: (compiler version, build date line, build id). From the CUDA
#: toolkit release notes component tables; build dates/ids are representative, not verified.
NVCC: dict[str, tuple[str, str, str]] = {
    "12.4.1": ("12.4.131", "Thu_Mar_28_02:18:24_PDT_2024", "34097967_0"),
    "12.8.0": ("12.8.61", "Fri_Jan__3_18:27:07_PST_2025", "35404655_0"),
    "12.8.1": ("12.8.93", "Fri_Feb_21_20:23:50_PST_2025", "35583870_0"),
    "12.9.0": ("12.9.41", "Tue_Apr__8_18:59:30_PDT_2025", "35813241_0"),
    "12.9.1": ("12.9.86", "Tue_May_27_02:21:03_PDT_2025", "36037853_0"),
    "13.0.0": ("13.0.48", "Wed_Jul_16_07:30:01_PM_PDT_2025", "36260728_0"),
    "13.0.2": ("13.0.88", "Wed_Sep_10_07:00:00_PM_PDT_2025", "36424714_0"),
}

#: cudart component version per release (container images CSV in ../shared; 13.0.2 unverified).
CUDART: dict[str, str] = {
    "12.4.1": "12.4.127",
    "12.8.0": "12.8.57",
    "12.8.1": "12.8.90",
    "12.9.0": "12.9.37",
    "12.9.1": "12.9.79",
    "13.0.0": "13.0.48",
    "13.0.2": "13.0.96",
}


def _nvcc(release: str) -> bytes:
    comp, built, build = NVCC[release]
    minor = ".".join(release.split(".")[:2])
    year = built.rsplit("_", 1)[-1]
    return (
        "#!/bin/sh\n"
        "# nvcc stand-in: only --version/-V.\n"
        'case "$1" in\n'
        "  --version|-V)\n"
        "    cat <<'EOF'\n"
        "nvcc: NVIDIA (R) Cuda compiler driver\n"
        f"Copyright (c) 2005-{year} NVIDIA Corporation\n"
        f"Built on {built}\n"
        f"Cuda compilation tools, release {minor}, V{comp}\n"
        f"Build cuda_{minor}.r{minor}/compiler.{build}\n"
        "EOF\n"
        "    exit 0;;\n"
        "esac\n"
        'echo "nvcc fatal   : gpufleet nvcc stand-in only supports --version" >&2\n'
        "exit 1\n"
    ).encode()


def _version_json(release: str) -> bytes:
    doc = {
        "cuda": {"name": "CUDA SDK", "version": release},
        "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": CUDART[release]},
        "cuda_nvcc": {"name": "CUDA NVCC", "version": NVCC[release][0]},
    }
    # The real file uses three-space indentation and " : " separators.
    return (json.dumps(doc, indent=3, separators=(",", " : ")) + "\n").encode()


def _nccl_h(version: str) -> bytes:
    major, minor, patch = (int(x) for x in version.split("."))
    code = major * 10000 + minor * 100 + patch
    return (
        "/*************************************************************************\n"
        " * NCCL header stand-in (gpufleet fixture): version macros only.\n"
        " ************************************************************************/\n\n"
        "#ifndef NCCL_H_\n#define NCCL_H_\n\n"
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
        '#define NCCL_SUFFIX ""\n\n'
        f"#define NCCL_VERSION_CODE {code}\n"
        "#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : "
        "(X) * 10000 + (Y) * 100 + (Z))\n\n"
        "#endif // end include guard\n"
    ).encode()


def _cudnn_version_h(version: str) -> bytes:
    major, minor, patch = version.split(".")[:3]
    return (
        "/* cuDNN version header stand-in (gpufleet fixture). */\n\n"
        "#ifndef CUDNN_VERSION_H_\n#define CUDNN_VERSION_H_\n\n"
        f"#define CUDNN_MAJOR {major}\n#define CUDNN_MINOR {minor}\n#define CUDNN_PATCHLEVEL {patch}\n\n"
        "#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)\n\n"
        "#endif /* CUDNN_VERSION_H */\n"
    ).encode()


def _pinning(branch: str) -> bytes:
    # NVIDIA's version-locking packages pin the driver stack to one branch; the exact file they ship
    # was not available, so this is a faithful-in-effect preferences stanza.
    return (
        f"Package: nvidia-* libnvidia-* cuda-drivers* *nvidia-fabricmanager* libnvidia-nscq*\n"
        f"Pin: version {branch}.*\n"
        "Pin-Priority: 1000\n"
    ).encode()


def payload(pkg: Package) -> Payload:
    """Files and maintainer scripts of one package."""
    m = pkg.meta
    kind = pkg.kind
    if kind == "nvidia-utils":
        return Payload(
            {
                "/usr/bin/nvidia-smi": (_wrapper("gpusim.py"), EXEC),
                "/usr/bin/gpusim-ctl": (_wrapper("gpusim.py", "--gpusim-ctl"), EXEC),
                f"{LIBDIR}/gpusim.py": _sim("gpusim.py"),
                f"{LIBDIR}/driver-version": (f"{m['driver']}\n".encode(), DATA),
                **{dest: (text, DATA) for dest, text in topo_files().items()},
            }
        )
    if kind == "nvidia-compute-utils":
        return Payload(
            {
                "/usr/bin/nvidia-persistenced": (_wrapper("persistenced.py"), EXEC),
                f"{LIBDIR}/persistenced.py": _sim("persistenced.py"),
                "/lib/systemd/system/nvidia-persistenced.service": (PERSISTENCED_UNIT.encode(), DATA),
            },
            postinst=DAEMON_RELOAD,
        )
    if kind == "fabricmanager":
        return Payload(
            {
                "/usr/bin/nv-fabricmanager": (_wrapper("fabricmanager.py"), EXEC),
                f"{LIBDIR}/fabricmanager.py": _sim("fabricmanager.py"),
                "/lib/systemd/system/nvidia-fabricmanager.service": (FABRICMANAGER_UNIT.encode(), DATA),
                "/usr/share/nvidia/nvswitch/fabricmanager.cfg": (FABRICMANAGER_CFG.encode(), DATA),
            },
            postinst=DAEMON_RELOAD,
        )
    if kind == "gpusim-common":
        # The daemon plumbing both stand-ins import: one owner for the path, and both packages depend on it.
        return Payload({f"{LIBDIR}/gpusim_daemon.py": _sim("gpusim_daemon.py")})
    if kind == "pinning":
        f = f"/etc/apt/preferences.d/nvidia-driver-pinning-{m['branch']}"
        return Payload({f: (_pinning(m["branch"]), DATA)}, conffiles=(f,))
    if kind == "cuda-toolkit":
        rel = m["release"]
        base = "/usr/local/cuda-" + ".".join(rel.split(".")[:2])
        return Payload(
            {
                f"{base}/version.json": (_version_json(rel), DATA),
                f"{base}/bin/nvcc": (_nvcc(rel), EXEC),
            }
        )
    if kind == "cudnn":
        v = m["cudnn"]
        so = "/usr/lib/x86_64-linux-gnu/libcudnn.so." + ".".join(v.split(".")[:3])
        return Payload({so: (f"cuDNN {v} placeholder (gpufleet fixture)\n".encode(), DATA)})
    if kind == "cudnn-dev":
        return Payload({"/usr/include/cudnn_version.h": (_cudnn_version_h(m["cudnn"]), DATA)})
    if kind == "nccl":
        v = m["nccl"]
        return Payload(
            {f"/usr/lib/x86_64-linux-gnu/libnccl.so.{v}": (f"NCCL {v} placeholder\n".encode(), DATA)}
        )
    if kind == "nccl-dev":
        return Payload({"/usr/include/nccl.h": (_nccl_h(m["nccl"]), DATA)})
    if kind == "dcgm-core":
        v = pkg.upstream
        return Payload(
            {
                "/usr/bin/nv-hostengine": (HOSTENGINE.replace("__VERSION__", v).encode(), EXEC),
                "/usr/bin/dcgmi": (DCGMI.replace("__VERSION__", v).encode(), EXEC),
                "/lib/systemd/system/nvidia-dcgm.service": (DCGM_UNIT.encode(), DATA),
            },
            postinst=DAEMON_RELOAD,
        )
    if kind == "ctk-base":
        return Payload(
            {
                "/usr/bin/nvidia-ctk": (NVIDIA_CTK.replace("__VERSION__", pkg.upstream).encode(), EXEC),
                "/usr/bin/nvidia-container-runtime": (CONTAINER_RUNTIME.encode(), EXEC),
            }
        )
    if kind == "empty":
        doc = f"/usr/share/doc/{pkg.name}/README.gpufleet"
        return Payload({doc: (f"{pkg.name} {pkg.version}: gpufleet fixture package.\n".encode(), DATA)})
    raise ValueError(f"no payload for kind {kind!r} ({pkg.name})")
