"""which-buffer's figures: accuracy against relative compute C with 95 % intervals, as
measured and compute-matched (with ``--compute-matched``; against train time without),
wall time as a second figure, each policy against the best; drawn again from a report."""

import json

import pytest

from avalanche_gss.reproduce.experiments import which_buffer_report
from avalanche_gss.reproduce.experiments.which_buffer_report import redraw
from avalanche_gss.reproduce.reports import plotting
from avalanche_gss.reproduce.reports.plotting import Panel, Series, plot_panels


def _report(matched: bool) -> dict:
    rows = []
    for i, policy in enumerate(("Reservoir", "CB-GSS")):
        for j, stream in enumerate(("disjoint", "imbalanced-1", "imbalanced-2")):
            row = {"policy": policy, "stream": stream, "buffer_size": 100, "seeds": [0, 1],
                   "avg": [50.0 + i + j, 52.0 + i + j], "train_seconds": [1.0 + i, 3.0 + i]}
            if matched:
                row |= {"matched_avg": [40.0 + i + j, 44.0 + i + j],
                        "matched_train_seconds": [1.0, 1.0 + i],
                        "relative_cost": ["1", "1"] if i == 0 else ["2", "5/2"],
                        "relative_cost_mean": 1.0 if i == 0 else 2.25}
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


def test_compute_matched_runs_plot_against_c_with_intervals_and_time_apart(tmp_path, drawn):
    (tmp_path / "which_buffer.json").write_text(json.dumps(_report(matched=True)))
    paths = redraw(tmp_path / "which_buffer.json")
    assert paths == {"png": str(tmp_path / "which_buffer.png"),
                     "time_png": str(tmp_path / "which_buffer_time.png"),
                     "intervals_png": str(tmp_path / "which_buffer_intervals.png")}
    assert (tmp_path / "which_buffer_intervals.png").read_bytes()[:4] == b"\x89PNG"
    call, time = drawn
    assert call["title"] == ("Accuracy vs relative compute C, MNIST (5,000-digit subset), "
                             "2 seed(s)")
    assert call["columns"] == 2 and call["one_legend"]
    titles = [p.title for p in call["panels"]]
    assert titles == ["disjoint, as measured",
                      "imbalanced (mean over 2 streams), as measured",
                      "disjoint, compute-matched",
                      "imbalanced (mean over 2 streams), compute-matched"]
    assert call["panels"][0].xlabel.startswith("relative compute C")
    measured, _, matched, matched_imb = call["panels"]
    t = 12.706204736174707  # t(0.975, 1 degree of freedom): 95 % over two seeds
    cb = {s.label: s for s in measured.series}["CB-GSS"]
    assert cb.x == [2.25] and cb.y == [52.0]  # C and accuracy, means over seeds 0 and 1
    assert cb.err == pytest.approx([t * 1.0])  # sd of (51, 53) / sqrt(2) = 1
    cb = {s.label: s for s in matched.series}["CB-GSS"]
    assert (cb.x, cb.y) == ([2.25], [43.0]) and cb.err == pytest.approx([t * 2.0])
    # a family: per seed the mean over its streams (42.5, 46.5), then over the seeds
    cb = {s.label: s for s in matched_imb.series}["CB-GSS"]
    assert cb.y == [44.5]
    assert "train time" in time["title"] and "wall time" in time["title"]
    cb = {s.label: s for s in time["panels"][0].series}["CB-GSS"]
    assert cb.x == [3.0]  # train seconds, as measured


def test_without_compute_matched_runs_one_row_against_train_time(tmp_path, drawn):
    (tmp_path / "r.json").write_text(json.dumps(_report(matched=False)))
    paths = redraw(tmp_path / "r.json", tmp_path / "elsewhere")
    (call,) = drawn
    assert paths["png"] == str(tmp_path / "elsewhere" / "which_buffer.png")
    assert call["columns"] is None and "time_png" not in paths
    assert [p.title for p in call["panels"]] == [
        "disjoint", "imbalanced (mean over 2 streams)"]
    assert call["panels"][0].xlabel.startswith("train seconds")


def test_a_single_seed_report_draws_no_intervals_figure(tmp_path, drawn):
    report = _report(matched=False)
    report["protocol"]["seeds"] = [0]
    for r in report["rows"]:
        r |= {"seeds": [0], "avg": r["avg"][:1], "train_seconds": r["train_seconds"][:1]}
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert "intervals_png" not in redraw(tmp_path / "r.json")


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
