"""The paper's figures as PNG files (matplotlib's Agg canvas; no display, no pyplot state).

Each function draws one figure from plain numbers (or a
:class:`~avalanche_gss.solid_angle.SurrogateStudy`) and returns the path it saved:

- :func:`plot_surrogate_vs_solid_angle`: Figure 2, solid angle against surrogate, log scale;
- :func:`plot_curves`: Figure 4, test accuracy along the stream, one line per method;
- :func:`plot_panels`: Figure 5, final accuracy against ``n`` and against the batch size;
  also accuracy against training time, one panel per stream (``which-buffer``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from avalanche_gss._atomic import replace_file
from avalanche_gss.solid_angle import SurrogateStudy

__all__ = ["Interval", "Panel", "Series", "plot_curves", "plot_intervals", "plot_panels",
           "plot_surrogate_vs_solid_angle"]

STYLES = ("line", "markers", "end", "reference")
"""How a :class:`Series` is drawn: a line (with a band of ``err``), markers joined by a
dashed line, a horizontal dashed line at its last value with a marker at its end, or
reference markers (e.g. the paper's numbers)."""


@dataclass(frozen=True)
class Series:
    """One labelled set of points.

    :param label: legend entry.
    :param x: abscissae.
    :param y: ordinates (same length).
    :param err: optional spread of ``y`` (std over seeds): a band for lines, error bars
        for markers.
    :param style: one of :data:`STYLES`.
    :param notes: optional text beside each point (e.g. its buffer size).
    """

    label: str
    x: Sequence[float]
    y: Sequence[float]
    err: Sequence[float] | None = None
    style: str = "line"
    notes: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if len(self.x) != len(self.y) or (self.err is not None and len(self.err) != len(self.y)):
            raise ValueError(f"series {self.label!r}: x, y and err must have the same length")
        if self.notes is not None and len(self.notes) != len(self.y):
            raise ValueError(f"series {self.label!r}: one note per point")
        if self.style not in STYLES:
            raise ValueError(f"unknown style {self.style!r}; choose from {', '.join(STYLES)}")


@dataclass(frozen=True)
class Panel:
    """One axes of :func:`plot_panels`.

    :param title: the panel's title.
    :param xlabel: x axis label.
    :param ylabel: y axis label.
    :param series: what to draw.
    :param logx: logarithmic x axis (values spanning decades, e.g. ``n`` from 1 to 50).
    :param data_ticks: x ticks at the series' x values (settings such as ``n``); ``False``:
        matplotlib's own ticks (measured values such as seconds).
    """

    title: str
    xlabel: str
    ylabel: str
    series: Sequence[Series] = field(default_factory=tuple)
    logx: bool = False
    data_ticks: bool = True


def _save(fig: Figure, path: str | os.PathLike[str]) -> str:
    """Save ``fig`` to ``path`` through a temporary file beside it, then ``os.replace``.

    A write that fails (a full disk) leaves the previous figure whole; a ``path`` that is
    a symbolic link is refused (:func:`~avalanche_gss._atomic.replace_file`).

    :raises OSError: the figure cannot be written, in one line naming ``path``.
    """
    path = os.fspath(path)
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    FigureCanvasAgg(fig)
    kind = os.path.splitext(path)[1][1:].lower() or None  # the format savefig would infer
    replace_file(path, lambda file: fig.savefig(file, format=kind, dpi=150,
                                                bbox_inches="tight"))
    return path


def _draw(ax: Axes, series: Sequence[Series], x_span: tuple[float, float] | None = None) -> None:
    """Draw every series on ``ax`` in its style."""
    for k, s in enumerate(series):
        color = f"C{k % 10}"
        if s.style == "line":
            ax.plot(s.x, s.y, color=color, label=s.label, linewidth=1.5)
            if s.err is not None and any(e > 0 for e in s.err):
                low = [y - e for y, e in zip(s.y, s.err, strict=True)]
                high = [y + e for y, e in zip(s.y, s.err, strict=True)]
                ax.fill_between(s.x, low, high, color=color, alpha=0.2, linewidth=0)
        elif s.style == "markers":
            # past ten series the colours repeat: the marker tells them apart
            ax.errorbar(s.x, s.y, yerr=s.err, color=color, label=s.label,
                        marker="osD^v"[(k // 10) % 5],
                        linestyle="--", linewidth=1, capsize=3)
        elif s.style == "end":
            if x_span is not None:
                ax.hlines(s.y[-1], *x_span, colors=color, linestyles=":", linewidth=1.2)
            ax.errorbar(s.x[-1:], s.y[-1:], yerr=None if s.err is None else s.err[-1:],
                        color=color, label=s.label, marker="D", linestyle="none", capsize=3)
        else:  # reference
            ax.plot(s.x, s.y, color="black", label=s.label, marker="*", markersize=11,
                    linestyle="none")
        for x, y, note in zip(s.x, s.y, s.notes or (), strict=False):
            ax.annotate(note, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6,
                        color=color)


def plot_surrogate_vs_solid_angle(
    studies: Mapping[str, SurrogateStudy],
    path: str | os.PathLike[str],
    *,
    title: str = "Surrogate vs solid angle",
) -> str:
    """Figure 2: each set's Monte Carlo solid angle (log scale) against its surrogate.

    Sets whose estimate is 0 (no draw in the cone) are drawn as open triangles at
    ``1 / n_samples``, the estimator's resolution.

    :param studies: the studies to overlay, by legend label (e.g. ``{"k=10": study}``).
    :param path: the PNG to write.
    :param title: the figure's title.
    :return: ``path``.
    """
    fig = Figure(figsize=(5.5, 4.2))
    ax = fig.add_subplot()
    for k, (label, study) in enumerate(studies.items()):
        color = f"C{k % 10}"
        floor = 1.0 / float(study.settings.get("n_samples", 1))
        hit = [r for r in study.records if r["solid_angle"] > 0]
        miss = [r for r in study.records if r["solid_angle"] <= 0]
        ax.scatter([r["surrogate"] for r in hit], [r["solid_angle"] for r in hit], s=12,
                   color=color, alpha=0.8,
                   label=f"{label}: Spearman {study.spearman:+.2f}, Pearson {study.pearson:+.2f}")
        if miss:
            ax.scatter([r["surrogate"] for r in miss], [floor] * len(miss), s=18,
                       marker="v", facecolors="none", edgecolors=color,
                       label=f"{label}: estimate 0 (< 1/N)")
    ax.set_yscale("log")
    ax.set_xlabel(r"surrogate $\sum_{i,j} \cos(g_i, g_j)$ (Eq. 5)")
    ax.set_ylabel("solid angle of the feasible cone (share of the sphere)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_curves(
    series: Sequence[Series],
    path: str | os.PathLike[str],
    *,
    title: str,
    xlabel: str = "training samples",
    ylabel: str = "test accuracy (%)",
    vlines: Sequence[float] = (),
    ylim: tuple[float, float] | None = (0.0, 100.0),
) -> str:
    """Figure 4: test accuracy along the stream, one series per method.

    :param series: the methods' curves (``"line"``), task-end points (``"markers"``) and
        end-of-training results (``"end"``: drawn across the whole stream as a dotted line).
    :param path: the PNG to write.
    :param title: the figure's title.
    :param xlabel: x axis label.
    :param ylabel: y axis label.
    :param vlines: x positions of thin vertical lines (task boundaries).
    :param ylim: y axis limits; ``None``: automatic.
    :return: ``path``.
    """
    fig = Figure(figsize=(7.0, 4.2))
    ax = fig.add_subplot()
    xs = [x for s in series for x in s.x]
    span = (min(xs), max(xs)) if xs else None
    for x in vlines:
        ax.axvline(x, color="grey", linestyle=":", linewidth=0.8)
    _draw(ax, series, span)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def plot_panels(panels: Sequence[Panel], path: str | os.PathLike[str], *, title: str = "",
                columns: int | None = None, one_legend: bool = False) -> str:
    """Figure 5: side-by-side panels of final accuracy against a setting.

    :param panels: one axes each, left to right, then row by row.
    :param path: the PNG to write.
    :param title: the figure's title.
    :param columns: panels per row (all in one row by default).
    :param one_legend: one legend for the figure, right of the panels (panels with the same
        series), instead of one in each panel.
    :return: ``path``.
    """
    if not panels:
        raise ValueError("need at least one panel")
    if columns is not None and columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    ncols = min(columns or len(panels), len(panels))
    nrows = -(-len(panels) // ncols)
    fig = Figure(figsize=(5.0 * ncols, 4.0 * nrows))
    grid = fig.subplots(nrows, ncols, squeeze=False)
    axes = [ax for row in grid for ax in row]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    for ax, panel in zip(axes, panels, strict=False):
        _draw(ax, panel.series)
        if panel.logx:
            ax.set_xscale("log")
        values = sorted({float(x) for s in panel.series for x in s.x})
        if values and panel.data_ticks:
            ax.set_xticks(values)
            ax.set_xticklabels([f"{v:g}" for v in values])
            ax.minorticks_off()
        ax.set_xlabel(panel.xlabel)
        ax.set_ylabel(panel.ylabel)
        ax.set_title(panel.title, fontsize=10)
        ax.grid(True, alpha=0.3)
        if not one_legend:
            ax.legend(fontsize=8)
    if one_legend:  # beside the panels, where it covers no point
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if title:
        fig.suptitle(title)
    return _save(fig, path)


@dataclass(frozen=True)
class Interval:
    """One row of :func:`plot_intervals`: an estimate and its confidence interval.

    :param label: the row's name.
    :param mean: the estimate.
    :param low: the interval's lower end.
    :param high: its upper end.
    :param highlight: drawn filled (e.g. a member of a recommended group), else open.
    """

    label: str
    mean: float
    low: float
    high: float
    highlight: bool = False


def plot_intervals(panels: Mapping[str, Sequence[Interval]], path: str | os.PathLike[str], *,
                   title: str = "", xlabel: str = "difference") -> str:
    """Estimates with their intervals, one row each, a panel per mapping entry.

    A vertical line marks 0: an interval across it is a tie.

    :param panels: per panel title, its rows, top to bottom.
    :param path: the PNG to write.
    :param title: the figure's title.
    :param xlabel: the x axis label.
    :return: ``path``.
    """
    if not panels:
        raise ValueError("need at least one panel")
    height = max(len(rows) for rows in panels.values())
    fig = Figure(figsize=(5.5 * len(panels), 1.6 + 0.28 * height), layout="constrained")
    grid = fig.subplots(1, len(panels), squeeze=False)
    for ax, (name, rows) in zip(grid[0], panels.items(), strict=True):
        for k, r in enumerate(rows):
            y = len(rows) - 1 - k
            ax.plot([r.low, r.high], [y, y], color="C0" if r.highlight else "grey",
                    linewidth=1.5)
            ax.plot([r.mean], [y], marker="o", color="C0" if r.highlight else "grey",
                    markerfacecolor="C0" if r.highlight else "white")
        ax.axvline(0.0, color="black", linewidth=0.8, linestyle=":")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([r.label for r in reversed(rows)], fontsize=8)
        ax.set_xlabel(xlabel)
        ax.set_title(name, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
    if title:
        fig.suptitle(title)
    return _save(fig, path)
