"""Bandwidth versus message size, one PNG per collective and scope, with the catalog's gate drawn on it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet.validation.bench import BenchVerdict

#: Pixels of every plot (width, height) at DPI: reports and tests rely on the size.
SIZE_PX = (1200, 700)
DPI = 100


@dataclass(frozen=True)
class PlotData:
    """What was drawn, read back from the figure's lines (tests compare it with the parsed rows)."""

    path: Path
    #: label -> (sizes in bytes, busbw GB/s) of the solid busbw line.
    busbw: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    #: label -> (sizes in bytes, algbw GB/s) of the dashed algbw line.
    algbw: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    #: (gate GB/s, from size in bytes) when a gate was drawn.
    gate: tuple[float, float] | None = None


def _human(n: float) -> str:
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n:g} B"


def _xy(line: Any) -> tuple[list[float], list[float]]:
    """The data a Line2D holds (what is on the image), as plain floats."""
    import numpy as np

    xs: list[float] = np.asarray(line.get_xdata(), dtype=float).tolist()
    ys: list[float] = np.asarray(line.get_ydata(), dtype=float).tolist()
    return xs, ys


def plot_bandwidth(verdicts: list[BenchVerdict], path: Path, title: str) -> PlotData:
    """Draw busbw (solid) and algbw (dashed) of each run against message size; the gate as a red line."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on CI or controllers
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(SIZE_PX[0] / DPI, SIZE_PX[1] / DPI), dpi=DPI)
    busbw: dict[str, tuple[list[float], list[float]]] = {}
    algbw: dict[str, tuple[list[float], list[float]]] = {}
    gate_drawn: tuple[float, float] | None = None
    try:
        for v in verdicts:
            sizes = [float(s) for s, _, _ in v.series]
            (line,) = ax.plot(sizes, [b for _, b, _ in v.series], marker="o", label=f"{v.label} busbw")
            (aline,) = ax.plot(sizes, [a for _, _, a in v.series], linestyle="--", alpha=0.6,
                               color=line.get_color(), label=f"{v.label} algbw")
            busbw[v.label] = _xy(line)
            algbw[v.label] = _xy(aline)
            if v.gate is not None and gate_drawn is None:
                right = max(sizes, default=float(v.gate.min_bytes) * 16)
                (gline,) = ax.plot([float(v.gate.min_bytes), max(right, float(v.gate.min_bytes))],
                                   [v.gate.busbw_gbs, v.gate.busbw_gbs], color="red", linewidth=2,
                                   label=f"gate {v.gate.busbw_gbs:g} GB/s (>= {_human(v.gate.min_bytes)})")
                gx, gy = _xy(gline)
                gate_drawn = (gy[0], gx[0])
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: _human(x)))
        ax.set_xlabel("message size")
        ax.set_ylabel("GB/s (out-of-place)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)
    return PlotData(path=path, busbw=busbw, algbw=algbw, gate=gate_drawn)
