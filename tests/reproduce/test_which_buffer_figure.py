"""which-buffer's figure: accuracy against train time, as measured and, with
``--compute-matched``, as the compute-matched runs gave it; drawn again from a report."""

import json

import pytest

from avalanche_gss import plotting
from avalanche_gss.plotting import Panel, Series, plot_panels
from avalanche_gss.reproduce import which_buffer_report
from avalanche_gss.reproduce.which_buffer_report import redraw


def _report(matched: bool) -> dict:
    rows = []
    for i, policy in enumerate(("Reservoir", "CB-GSS")):
        for j, stream in enumerate(("disjoint", "imbalanced-1", "imbalanced-2")):
            row = {"policy": policy, "stream": stream, "buffer_size": 100, "seeds": [0, 1],
                   "avg": [50.0 + i + j, 52.0 + i + j], "train_seconds": [1.0 + i, 3.0 + i]}
            if matched:
                row |= {"matched_avg": [40.0 + i + j, 44.0 + i + j],
                        "matched_train_seconds": [1.0, 1.0 + i]}
            rows.append(row)
    return {"dataset": "mnist-5k", "data_verified_as": "mnist-5k", "rows": rows,
            "protocol": {"policies": ["Reservoir", "CB-GSS"], "buffer_sizes": [100],
                         "seeds": [0, 1], "streams": [{"name": s} for s in
                                                      ("disjoint", "imbalanced-1",
                                                       "imbalanced-2")]}}


@pytest.fixture
def drawn(monkeypatch):
    """What the figure was asked to draw: its panels, title and panels per row."""
    calls = []

    def record(panels, path, *, title="", columns=None, one_legend=False):
        calls.append({"panels": panels, "title": title, "columns": columns, "path": path,
                      "one_legend": one_legend})
        return str(path)

    monkeypatch.setattr(which_buffer_report, "plot_panels", record)
    return calls


def test_compute_matched_runs_get_a_second_row_of_panels(tmp_path, drawn):
    (tmp_path / "which_buffer.json").write_text(json.dumps(_report(matched=True)))
    assert redraw(tmp_path / "which_buffer.json") == str(tmp_path / "which_buffer.png")
    (call,) = drawn
    assert call["title"] == "Accuracy vs train time per run, MNIST (5,000-digit subset), 2 seed(s)"
    assert call["columns"] == 2 and call["one_legend"]
    titles = [p.title for p in call["panels"]]
    assert titles == ["disjoint, as measured",
                      "imbalanced (mean over 2 streams), as measured",
                      "disjoint, compute-matched",
                      "imbalanced (mean over 2 streams), compute-matched"]
    measured, _, matched, matched_imb = call["panels"]
    cb = {s.label: s for s in measured.series}["CB-GSS"]
    assert (cb.x, cb.y, cb.err) == ([3.0], [52.0], [1.0])  # means over seeds 0 and 1
    cb = {s.label: s for s in matched.series}["CB-GSS"]
    assert (cb.x, cb.y, cb.err) == ([1.5], [43.0], [2.0])
    # a family: per seed the mean over its streams (42.5, 46.5), then over the seeds
    cb = {s.label: s for s in matched_imb.series}["CB-GSS"]
    assert cb.y == [44.5]


def test_without_compute_matched_runs_one_row_as_before(tmp_path, drawn):
    (tmp_path / "r.json").write_text(json.dumps(_report(matched=False)))
    redraw(tmp_path / "r.json", tmp_path / "elsewhere.png")
    (call,) = drawn
    assert call["path"] == str(tmp_path / "elsewhere.png") and call["columns"] is None
    assert [p.title for p in call["panels"]] == [
        "disjoint", "imbalanced (mean over 2 streams)"]


def test_panels_in_rows_write_a_png_and_a_bad_column_count_is_refused(tmp_path):
    panels = [Panel(f"p{k}", "x", "y", [Series("s", [1.0, 2.0], [3.0, 4.0])])
              for k in range(3)]
    path = plot_panels(panels, tmp_path / "grid.png", title="t", columns=2, one_legend=True)
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path
    with pytest.raises(ValueError, match="columns must be >= 1, got 0"):
        plotting.plot_panels(panels, tmp_path / "no.png", columns=0)


def test_one_legend_stands_beside_the_panels_not_on_one(tmp_path, monkeypatch):
    # With many policies a legend inside the first panel covers its points
    saved = []
    monkeypatch.setattr(plotting, "_save", lambda fig, path: saved.append(fig) or str(path))
    panels = [Panel(f"p{k}", "x", "y", [Series(n, [1.0, 2.0], [3.0, 4.0]) for n in "ab"])
              for k in range(2)]
    plotting.plot_panels(panels, tmp_path / "grid.png", one_legend=True)
    fig = saved[0]
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert [[t.get_text() for t in legend.get_texts()] for legend in fig.legends] == [["a", "b"]]
