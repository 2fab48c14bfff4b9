"""What every figure shares: writing a figure (atomically, or as inline PNG bytes), the
quantile bands, the colour of each draft length, plain-number axes and the line at the
highest fitted rate.

Conventions every figure follows (what a serving engineer reads off them):

- bands are drawn under the data and outlined, so a narrow band stays visible;
- a curve ends where the system it describes saturates (and says so) instead of
  running on as a flat zero or a spike;
- the highest fitted rate (the highest rate that entered the fit) is a vertical dotted
  line: anything to its right (a saturation rate, a crossover RPS*) is an extrapolation of
  the law. "Highest measured" means the highest rate in the data file, set-aside points
  included, in figures as in tables;
- what an answer marks ``extrapolated`` (:meth:`bayesspec.prediction.Law.extrapolated`)
  is drawn open (a hollow marker) or dashed, never as a measurement;
- one colour per draft length k, the same in every figure (:func:`k_colour`);
- tick labels are plain numbers and never collide.
"""

from __future__ import annotations

import math
import os
import re
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from bayesspec.outputs import atomic_path  # noqa: E402

BAND_PROB = 0.9
FITTED_STYLE = {"color": "0.15", "ls": ":", "lw": 1.5}
FITTED_LABEL = "highest fitted rate"
#: Older names of the same line's style and label.
MEASURED_STYLE, MEASURED_LABEL = FITTED_STYLE, FITTED_LABEL
#: Dashes of what is the law's extrapolation (a curve past its highest fitted rate, a k
#: or alpha not measured).
EXTRAPOLATED_DASHES = (0, (4, 2))


def save_figure(figure, path: str | os.PathLike, *, dpi: int = 120) -> str:
    """Write a figure atomically (PNG, or the format the suffix names) and close it."""
    try:
        with atomic_path(path) as temporary:
            figure.savefig(temporary, dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)
    return str(path)


def figure_png(figure, *, dpi: int = 100) -> bytes:
    """A figure as PNG bytes (for pages that carry their figures inline), closed."""
    import io

    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    finally:
        plt.close(figure)
    return buffer.getvalue()


def _quantiles(draws, prob=BAND_PROB):
    tail = (1 - prob) / 2
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns past saturation
        return np.nanquantile(draws, [tail, 0.5, 1 - tail], axis=0)


def _saturating_quantiles(draws, prob=BAND_PROB):
    """Quantiles over draws of a latency where saturated draws are +inf.

    Infinite draws stay in (as a huge value), so an upper quantile leaves the plot when
    more than its tail is saturated instead of bending back down to the unsaturated
    draws; columns where more than half the draws are saturated become NaN (the curve
    ends at the median saturation rate) and so does an upper edge that is off the chart.
    """
    draws = np.asarray(draws, dtype=float)
    huge = np.where(np.isfinite(draws), draws, 1e300)
    lo, median, hi = _quantiles(huge, prob)
    off = lambda values: np.where(values >= 1e299, np.nan, values)  # noqa: E731
    return off(lo), off(median), np.where(hi >= 1e299, 1e12, hi)


def _monotone_band(lo, hi, *, slack: float = 0.95):
    """NaN from where ``lo`` first drops below ``slack`` times its running maximum on:
    a latency band whose lower edge falls with load has left the noise model's range."""
    lo = np.asarray(lo, dtype=float)
    filled = np.where(np.isfinite(lo), lo, -np.inf)
    falling = filled < slack * np.maximum.accumulate(filled)
    if not falling.any():
        return lo, hi
    cut = int(np.argmax(falling))
    lo, hi = lo.copy(), np.asarray(hi, dtype=float).copy()
    lo[cut:] = np.nan
    hi[cut:] = np.nan
    return lo, hi


def _replicates(draws: int, target: int = 4000) -> int:
    """Noise replicates per posterior draw so that a predictive band has ~``target``
    samples (its edges are quantiles of random draws: fewer make them ragged)."""
    return max(1, min(20, math.ceil(target / max(draws, 1))))


# --------------------------------------------------------------------------------------
# Shared styling


# --------------------------------------------------------------------------------------

# Qualitative colours for draft lengths 1..10 (tab10 without its grey, plus a dark
# indigo); k = 0 (do not speculate) is a light grey; 11..20 are lighter versions.
_K_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
              "tab:pink", "tab:olive", "tab:cyan", "#393b79")
K_ZERO_COLOUR = "#d4d4d4"


def k_colour(k: int):
    """The colour of draft length ``k`` in every figure (RGBA)."""
    k = int(k)
    if k <= 0:
        return to_rgba(K_ZERO_COLOUR)
    if k <= len(_K_COLOURS):
        return to_rgba(_K_COLOURS[k - 1])
    if k <= 2 * len(_K_COLOURS):
        base = np.array(to_rgba(_K_COLOURS[k - 1 - len(_K_COLOURS)]))
        return tuple(0.45 * base[:3] + 0.55) + (1.0,)
    golden = (k * 0.618033988749895) % 1.0
    return tuple(plt.cm.hsv(golden)[:3]) + (1.0,)


def _plain_number(value, _position=None) -> str:
    """Tick text without scientific notation: 0.02, 0.5, 3, 40, 1e+04 only when huge."""
    if value == 0 or not np.isfinite(value):
        return "0" if value == 0 else ""
    if 1e-4 <= abs(value) < 1e5:
        return f"{value:.6g}"
    return f"{value:.0e}"


def _plain_log_axis(axis, which: str) -> None:
    """Log scale with plain-number labels; minor ticks labelled only where there is room.

    Call after the data are drawn (the labelled minor ticks depend on the span)."""
    getattr(axis, f"set_{which}scale")("log")
    low, high = getattr(axis, f"get_{which}lim")()
    decades = math.log10(high / low) if low > 0 and high > low else 3.0
    ticks = axis.xaxis if which == "x" else axis.yaxis
    ticks.set_major_formatter(FuncFormatter(_plain_number))
    if decades <= 0.8:
        labelled = (2, 3, 4, 5, 6, 7, 8)
    elif decades <= 1.6:
        labelled = (2, 5)
    elif decades <= 2.6:
        labelled = (3,)
    else:
        labelled = ()

    def minor(value, _position=None):
        if value <= 0:
            return ""
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return _plain_number(value) if round(mantissa) in labelled and \
            abs(mantissa - round(mantissa)) < 1e-6 else ""

    ticks.set_minor_formatter(FuncFormatter(minor) if labelled else NullFormatter())


def _fitted_line(axis, rate, *, label: bool = True, of: str = ""):
    """The highest fitted rate (``of``: whose, e.g. " of the dense baseline"): a vertical
    dotted line (fitted data end, extrapolation begins)."""
    if rate is None or not np.isfinite(rate):
        return None
    beyond = rate > axis.get_xlim()[1]
    return axis.axvline(rate, **FITTED_STYLE, zorder=5,
                        label=(f"{FITTED_LABEL}{of} ({rate:.3g} RPS"
                               + (", right of the plot)" if beyond else ")")) if label else None)


def _wrap(text: str, width: int) -> str:
    """Wrap at spaces and, in long names, after '/', '+', ',' and '_'."""
    pieces = re.split(r"(?<=[ /+,_])", str(text))
    lines, line = [], ""
    for piece in pieces:
        if line and len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        while len(piece) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        line += piece
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)
