"""The simulator's scripts as the fixture build sees them: the files it ships, and what it renders from gpusim's
boards at build time (the nodes that run the simulator do not have gpufleet).

``testbed/simulator/`` is not a Python package but the private module directory installed as ``/usr/lib/gpusim/``:
its scripts import each other as top-level modules (``import gpusim_daemon``), so the build loads ``gpusim`` the
same way, by file, instead of as ``testbed.simulator.gpusim``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from gpufleet.topology import Topology, build_board, render_topo_m

SIMULATOR_DIR = Path(__file__).resolve().parents[1] / "simulator"
#: Where the fixture packages install the scripts (a private module directory, Debian Python policy).
LIBDIR = "/usr/lib/gpusim"


def _load(name: str) -> ModuleType:
    found = sys.modules.get(name)
    if found is None:
        spec = importlib.util.spec_from_file_location(name, SIMULATOR_DIR / f"{name}.py")
        assert spec is not None and spec.loader is not None
        found = importlib.util.module_from_spec(spec)
        # Registered before it runs: dataclasses look their module up in sys.modules.
        sys.modules[name] = found
        spec.loader.exec_module(found)
    return found


if TYPE_CHECKING:
    import gpusim  # mypy finds it through mypy_path, as the scripts find each other
else:
    gpusim = _load("gpusim")


def board_topology(name: str) -> Topology:
    """The topology model of simulated board ``name``, from the facts its Board carries."""
    b = gpusim.BOARDS[name]
    return build_board(gpus=b.count, nvlink=b.nvlink, numa_cpus=b.numa_cpus, nics=b.nics)


def topo_files() -> dict[str, bytes]:
    """Installed path -> ``topo -m`` text of every board, rendered at fixture-build time."""
    return {f"{gpusim.TOPO_DIR}/{name}.txt": render_topo_m(board_topology(name)).encode()
            for name in sorted(gpusim.BOARDS)}
