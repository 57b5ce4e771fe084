"""The figure plots: the PNG is written and the axes hold what was given to them.

The module draws on matplotlib's Agg canvas itself (no pyplot, no display), whatever the
configured backend; the tests check that too.
"""

import errno
import os

import pytest
from helpers import PNG_MAGIC
from matplotlib import _pylab_helpers
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure

from avalanche_gss.reproduce.reports import plotting
from avalanche_gss.reproduce.reports.plotting import (
    Panel,
    Series,
    plot_curves,
    plot_panels,
    plot_surrogate_vs_solid_angle,
)
from avalanche_gss.solid_angle import SurrogateStudy


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions save, in order (they return only the path)."""
    saved = []
    real = plotting._save

    def spy(fig, path):
        saved.append(fig)
        return real(fig, path)

    monkeypatch.setattr(plotting, "_save", spy)
    return saved


def is_png(path):
    with open(path, "rb") as f:
        return f.read(8) == PNG_MAGIC


def series_lines(ax):
    """``{label: data line}`` of every series drawn: plain lines and error-bar plots."""
    lines = {line.get_label(): line for line in ax.get_lines()
             if not line.get_label().startswith("_")}
    for container in ax.containers:  # errorbar: the label is the container's
        lines[container.get_label()] = container.lines[0]
    return lines


def test_curves_draw_each_series_with_its_labels_limits_and_task_boundaries(tmp_path, figures):
    managed = _pylab_helpers.Gcf.get_num_fig_managers()
    path = plot_curves(
        [Series("GSS-Greedy", [100, 200, 300], [90, 60, 50], err=[1, 2, 3]),
         Series("Rand", [100, 200, 300], [80, 55, 45], err=[0, 0, 0]),
         Series("iid-offline", [100, 300], [70, 85], style="end")],
        tmp_path / "fig" / "curves.png", title="disjoint MNIST", vlines=[150, 250])
    assert path == str(tmp_path / "fig" / "curves.png") and is_png(path)
    assert _pylab_helpers.Gcf.get_num_fig_managers() == managed  # no pyplot figure left open
    assert isinstance(figures[0].canvas, FigureCanvasAgg)
    (ax,) = figures[0].axes
    assert ax.get_title() == "disjoint MNIST"
    assert ax.get_xlabel() == "training samples" and ax.get_ylabel() == "test accuracy (%)"
    assert ax.get_ylim() == (0.0, 100.0)
    lines = series_lines(ax)
    assert list(lines) == ["GSS-Greedy", "Rand", "iid-offline"]
    assert list(lines["GSS-Greedy"].get_xdata()) == [100, 200, 300]
    assert list(lines["GSS-Greedy"].get_ydata()) == [90, 60, 50]
    assert lines["GSS-Greedy"].get_color() == "C0" and lines["Rand"].get_color() == "C1"
    assert list(lines["iid-offline"].get_ydata()) == [85]  # a marker at its last point only
    # A band only where there is a spread: GSS-Greedy's, not Rand's all-zero one
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1 and bands[0].get_facecolor()[0][:3] == pytest.approx(
        to_rgba("C0")[:3])
    # The end-of-training result spans the whole stream, as a dotted line at its value
    (end,) = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert [list(map(list, seg)) for seg in end.get_segments()] == [[[100, 85], [300, 85]]]
    boundaries = [line for line in ax.get_lines() if line not in lines.values()]
    assert sorted(line.get_xdata()[0] for line in boundaries) == [150, 250]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(lines)


def test_curves_keep_automatic_limits_when_asked(tmp_path, figures):
    plot_curves([Series("a", [0, 1], [1000, 2000])], tmp_path / "c.png", title="t",
                ylim=None, xlabel="steps", ylabel="loss")
    (ax,) = figures[0].axes
    low, high = ax.get_ylim()
    assert low < 1000 and 2000 < high < 3000
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("steps", "loss")


def test_panels_one_axes_each_with_its_scale_ticks_and_reference(tmp_path, figures):
    path = plot_panels(
        [Panel("accuracy vs n", "n", "accuracy (%)",
               [Series("GSS-Greedy", [1, 10, 50], [70, 75, 78], [1, 2, 1], "markers"),
                Series("paper", [10], [77.3], style="reference")], logx=True),
         Panel("accuracy vs batch", "batch size", "accuracy (%)",
               [Series("GSS-Greedy", [5, 10, 20], [71, 74, 72])])],
        tmp_path / "panels.png", title="Figure 5")
    assert is_png(path)
    fig = figures[0]
    assert fig.get_suptitle() == "Figure 5"
    left, right = fig.axes
    assert (left.get_title(), left.get_xlabel(), left.get_ylabel()) == (
        "accuracy vs n", "n", "accuracy (%)")
    assert left.get_xscale() == "log" and right.get_xscale() == "linear"
    # Ticks exactly at the values run, labelled without trailing zeros
    assert list(left.get_xticks()) == [1, 10, 50]
    assert [t.get_text() for t in left.get_xticklabels()] == ["1", "10", "50"]
    assert list(right.get_xticks()) == [5, 10, 20]
    lines = series_lines(left)
    assert set(lines) == {"GSS-Greedy", "paper"}
    assert lines["paper"].get_marker() == "*" and lines["paper"].get_color() == "black"
    assert lines["paper"].get_linestyle() == "None"
    assert lines["GSS-Greedy"].get_marker() == "o"
    assert list(lines["GSS-Greedy"].get_ydata()) == [70, 75, 78]
    assert [t.get_text() for t in right.get_legend().get_texts()] == ["GSS-Greedy"]


def test_panels_need_at_least_one(tmp_path):
    with pytest.raises(ValueError, match="at least one panel"):
        plot_panels([], tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_surrogate_plot_is_log_scale_and_puts_zero_estimates_at_the_resolution(tmp_path,
                                                                               figures):
    records = [{"surrogate": 2.0, "solid_angle": 0.05}, {"surrogate": 5.0, "solid_angle": 0.01},
               {"surrogate": 9.0, "solid_angle": 0.0}]
    study = SurrogateStudy(records, pearson=-0.9, spearman=-1.0, log_pearson=-0.95,
                           settings={"n_samples": 1000})
    path = plot_surrogate_vs_solid_angle({"k=4": study}, tmp_path / "fig2.png", title="Fig 2")
    assert is_png(path)
    (ax,) = figures[0].axes
    assert ax.get_yscale() == "log" and ax.get_title() == "Fig 2"
    hits, misses = ax.collections
    assert hits.get_offsets().tolist() == [[2.0, 0.05], [5.0, 0.01]]
    assert misses.get_offsets().tolist() == [[9.0, 1 / 1000]]  # drawn at 1 / n_samples
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["k=4: Spearman -1.00, Pearson -0.90", "k=4: estimate 0 (< 1/N)"]


def test_series_check_lengths_and_styles():
    with pytest.raises(ValueError, match="same length"):
        Series("x", [1, 2], [1, 2], err=[1])
    with pytest.raises(ValueError, match="unknown style 'bars'"):
        Series("x", [1], [1], style="bars")


def _draw_curves(path):
    return plot_curves([Series("GSS-Greedy", [100, 200], [90, 60])], path, title="t")


def test_a_figure_that_fails_mid_write_leaves_the_old_one_whole(tmp_path, monkeypatch):
    # Given a figure already drawn
    path = tmp_path / "which_buffer.png"
    _draw_curves(path)
    before = path.read_bytes()

    # When the disk fills up while it is drawn again (savefig writes part, then fails)
    def full(self, fname, **kwargs):
        if isinstance(fname, str | os.PathLike):  # a path: savefig opens it, truncating it
            with open(fname, "wb") as file:
                file.write(PNG_MAGIC + b"partial")
        else:
            fname.write(PNG_MAGIC + b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Figure, "savefig", full)
    with pytest.raises(OSError) as info:
        _draw_curves(path)
    # Then the error is one line naming the figure, the old figure is whole, nothing is left
    assert info.value.errno == errno.ENOSPC
    assert str(path) in str(info.value) and "\n" not in str(info.value)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["which_buffer.png"]


def test_a_figure_path_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone's file")
    link = tmp_path / "curves.png"
    link.symlink_to(target)
    dangling = tmp_path / "other.png"
    dangling.symlink_to(tmp_path / "created.txt")
    for path in (link, dangling):
        with pytest.raises(OSError, match=f"refusing to write {path}: it is a symbolic link"):
            _draw_curves(path)
    assert target.read_text() == "someone's file"
    assert not (tmp_path / "created.txt").exists()
    assert link.is_symlink() and dangling.is_symlink()
