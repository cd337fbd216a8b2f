"""The GPU simulator: ``nvidia-smi``, ``nvidia-persistenced`` and ``nv-fabricmanager`` stand-ins.

These files are shipped only inside the fixture repository's driver packages (see
``testbed.fixture_repo``), which install them under ``/usr/lib/gpusim/``. Each is a standalone,
standard-library-only script run by the host's ``python3``; ``gpusim.py`` documents the files
it reads and the ``gpusim-ctl`` fault-injection commands. Code the daemon stand-ins share lives in
``daemon.py``, which is not installed: :func:`script` inlines it into each script that imports it.
"""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.topology import Topology, build_board, render_topo_m

SIMULATOR_DIR = Path(__file__).resolve().parent

#: Files installed to /usr/lib/gpusim/ (name in this package == name installed).
GPUSIM_FILES = ("gpusim.py",)
PERSISTENCED_FILES = ("persistenced.py",)
FABRICMANAGER_FILES = ("fabricmanager.py",)

_SHARED_IMPORT = re.compile(r"^from testbed\.simulator\.(\w+) import [\w, ]+\n", re.M)
_FUTURE = "from __future__ import annotations\n"


def _inlined(match: re.Match[str]) -> str:
    module = match.group(1)
    source = (SIMULATOR_DIR / f"{module}.py").read_bytes().decode()
    # Everything after the future import: the module's own docstring stays behind, and so does the
    # import, which may only stand at the top of the script.
    _, sep, body = source.partition(_FUTURE)
    if not sep:
        raise ValueError(f"testbed/simulator/{module}.py lacks {_FUTURE.strip()!r}")
    head = f"# --- testbed/simulator/{module}.py, inlined by the fixture build ---"
    return f"{head}\n{body.strip()}\n\n\n# --- end of {module}.py ---\n"


def script(name: str) -> bytes:
    """The standalone script installed as ``/usr/lib/gpusim/<name>``: the source of ``name`` with each
    ``from testbed.simulator.<module> import ...`` line replaced by that module's code."""
    text = _SHARED_IMPORT.sub(_inlined, (SIMULATOR_DIR / name).read_bytes().decode())
    if re.search(r"^\s*(from|import) (gpufleet|testbed)\b", text, re.M):
        raise ValueError(f"{name} still imports gpufleet/testbed after inlining")
    return text.encode()


def board_topology(name: str) -> Topology:
    """The topology model of simulated board ``name``, from the facts its Board carries."""
    from testbed.simulator.gpusim import BOARDS

    b = BOARDS[name]
    return build_board(gpus=b.count, nvlink=b.nvlink, numa_cpus=b.numa_cpus, nics=b.nics)


def topo_files() -> dict[str, bytes]:
    """Installed path -> ``topo -m`` text of every board: rendered here, at fixture-build time, because the
    nodes that run the simulator do not have gpufleet."""
    from testbed.simulator.gpusim import BOARDS, TOPO_DIR

    return {f"{TOPO_DIR}/{name}.txt": render_topo_m(board_topology(name)).encode() for name in sorted(BOARDS)}
