"""The axes every report plot shares (host/report/plots.py draws the series on them): an off-display figure,
a log axis ticked at the sequence lengths measured or with plain-number ticks, labels and a light grid, the legend
outside the axes (long lines wrapped), and the figure as PNG bytes.
Layer L3: it imports nothing of the project.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 120
MAX_SEQ_TICKS = 12
#: Legend lines longer than this are wrapped (the roofline's roofs name their device and source).
LEGEND_WIDTH = 110


def figure(width: float, height: float) -> Figure:
    """A figure drawn by Agg, off any display. matplotlib's object API is used, never pyplot (no global state); it is
    imported here, so an error path (a missing folder) does not pay for it."""
    from matplotlib.figure import Figure
    return Figure(figsize=(width, height))


def seq_ticks(seqs: Sequence[float]) -> tuple[list[int], list[int]]:
    """(labelled, unlabelled): the measured sequence lengths, at most MAX_SEQ_TICKS of them labelled, spread evenly
    on a log axis so that labels do not overlap (the smallest and largest always); the others get a bare tick."""
    values = sorted({int(v) for v in seqs if v > 0})
    if len(values) < 2:
        return values, []
    step = math.log(values[-1] / values[0]) / (MAX_SEQ_TICKS - 1)
    kept = [values[0]]
    for v in values[1:-1]:
        if math.log(v / kept[-1]) >= step and math.log(values[-1] / v) >= step / 2:
            kept.append(v)
    kept.append(values[-1])
    return kept, [v for v in values if v not in kept]


def seq_axis(ax: Axes, seqs: pd.Series) -> None:
    """A log x axis ticked at the sequence lengths measured (not at powers of ten), labelled where labels fit."""
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter
    labelled, bare = seq_ticks(list(seqs))
    ax.set_xscale("log")
    ax.set_xlim(labelled[0] / 1.3, labelled[-1] * 1.3)
    ax.xaxis.set_major_locator(FixedLocator(labelled))
    ax.xaxis.set_minor_locator(FixedLocator(bare))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.get_major_formatter().set_scientific(False)
    ax.xaxis.set_minor_formatter(NullFormatter())


def log_axis(ax: Axes, which: str) -> None:
    """A log scale on ax's "x" or "y" axis with plain-number ticks; 2 and 5 within each decade are labelled on short
    ranges."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    low, high = getattr(ax, f"get_{which}lim")()
    short = math.log10(high / low) < 2
    axis.set_major_locator(LogLocator(base=10))
    axis.set_minor_locator(LogLocator(base=10, subs=(2, 5) if short else (2, 3, 4, 5, 6, 7, 8, 9)))
    axis.set_major_formatter(FuncFormatter(_tick))
    axis.set_minor_formatter(FuncFormatter(_tick) if short else NullFormatter())


def _tick(value: float, _position: int) -> str:
    return f"{value:g}"


def finish(ax: Axes, xlabel: str, ylabel: str, title: str = "", legend: bool = True) -> None:
    """What every plot's axes end with: labels, title, a light grid, the legend outside on the right."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if legend:
        place_legend(ax)


def place_legend(ax: Axes, handles: list | None = None, below: bool = False) -> None:
    """The legend outside the axes, on the right (or below, where its lines are long): of the labelled artists, or
    of the handles given; lines longer than LEGEND_WIDTH wrapped."""
    import textwrap
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    else:
        labels = [h.get_label() for h in handles]
    labels = ["\n".join(textwrap.wrap(label, LEGEND_WIDTH, subsequent_indent="  ")) for label in labels]
    where = dict(loc="upper center", bbox_to_anchor=(0.5, -0.11)) if below else dict(loc="upper left",
                                                                                      bbox_to_anchor=(1.01, 1.0))
    ax.legend(handles, labels, fontsize="small", **where)


def png_bytes(fig: Figure) -> bytes:
    """The figure as a PNG, drawn in memory: the file is written in one go by host/report/outputs.py, so a full disk
    meets a plain write (and says so), not the PNG encoder midway."""
    import io
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()
