"""The GPU simulator: ``nvidia-smi``, ``nvidia-persistenced`` and ``nv-fabricmanager`` stand-ins.

These files are shipped only inside the fixture repository's driver packages (see
``gpufleet.fixture_repo``), which install them under ``/usr/lib/gpusim/``. Each is a standalone,
standard-library-only script run by the host's ``python3``; ``gpusim.py`` documents the files
it reads and the ``gpusim-ctl`` fault-injection commands.
"""

from pathlib import Path

SIMULATOR_DIR = Path(__file__).resolve().parent

#: Files installed to /usr/lib/gpusim/ (name in this package == name installed).
GPUSIM_FILES = ("gpusim.py",)
PERSISTENCED_FILES = ("persistenced.py",)
FABRICMANAGER_FILES = ("fabricmanager.py",)
