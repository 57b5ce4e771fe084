"""Turn runs into the paper-style outputs of ``python -m reproduce``.

``rows_from_runs`` groups runs that differ only by seed into one row
(:mod:`avalanche_gss.reproduce.reports.rows`);
``write_report`` is the one writer of every experiment's JSON, CSV and Markdown;
``write_outputs`` writes a table's ``<experiment>.json``, ``.csv`` and ``.md`` (ours beside
the paper's number in every cell the paper has, when the runs used data verified to be the
paper's);
``protocol_line`` states the protocol a run followed; ``provenance`` says what produced
them (versions, commit, device, threads).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, TypedDict

import avalanche_gss.provenance as _library
from avalanche_gss._atomic import replace_file
from avalanche_gss.provenance import provenance_line
from avalanche_gss.reproduce.reports.paper import (
    PAPER_SEEDS,
    REPRODUCE_ALPHA,
    ReproduceTest,
    reproduce_test,
)
from avalanche_gss.reproduce.reports.rows import (
    DIVERGED_SHARE,
    Row,
    diverged,
    group_rows,
    rows_from_runs,
    warning_lines,
)
from avalanche_gss.reproduce.runs.cache import package_sha256

__all__ = ["DIVERGED_SHARE", "Row", "diverged", "group_rows", "rows_from_runs",
           "output_paths", "table_csv", "table_markdown", "write_outputs", "write_report",
           "write_text",
           "format_cell", "provenance", "provenance_line", "protocol_line", "data_lines",
           "replay_words", "shared_places", "ReproduceRecord", "reproduce_tests",
           "reproduce_lines"]


def provenance(device: str, threads: int) -> dict[str, Any]:
    """What produced a report: :func:`avalanche_gss.provenance.provenance`, and the code.

    ``code_sha256`` is the SHA-256 of the package's source, as every run's cache key holds
    it (:func:`~avalanche_gss.reproduce.runs.cache.package_sha256`): it names the code
    where no commit does (an installed wheel, a copy of the source), and a checkout's
    source can be hashed to match it (``source_sha256`` of its ``avalanche_gss`` folder).

    :param device: the device the runs trained on.
    :param threads: the torch threads each run used.
    """
    return {**_library.provenance(device, threads), "code_sha256": package_sha256()}


def _std(values: Sequence[float]) -> float | None:
    """Population std; ``None`` for fewer than two values (one value has no spread)."""
    return statistics.pstdev(values) if len(values) > 1 else None


def _sizes(values: Sequence[int]) -> str:
    """``"800"`` when every task has the same count, else ``"2000/200/200"``."""
    if not values:
        return "?"
    if len(set(values)) == 1:
        return f"{values[0]:,}"
    return "/".join(f"{v:,}" for v in values)


ReportView: TypeAlias = Mapping[str, Any]
"""A report's JSON object as its files hold it (:meth:`.report.Report.to_json`), read back:
free-form JSON, which the Markdown and CSV writers read by the keys users see."""

PaperCells: TypeAlias = Mapping[tuple[str, Any], tuple[float, float | None]]
"""The paper's cells, keyed ``(method, column value)``: ``(mean, std)``."""

PaperAverages: TypeAlias = Mapping[str, tuple[float, float | None]]
"""The paper's averages by method: ``(mean, std)``."""


def _setting_words(key: str, value: object) -> str:
    return {"lr": f"learning rate {value}",
            "n_iter": f"{value} iteration{'s' if value != 1 else ''} per batch"}.get(
                key, f"{key} {value}")


def protocol_line(protocol: ReportView, prefix: str = "Protocol: ") -> str | None:
    """One Markdown line stating the protocol as run, deviating from the paper's or not.

    Tasks, training and test samples per task, learning rate, iterations per batch, buffer
    sizes ``M``, batch sizes and seeds, and each method's own learning rate or iterations
    where they differ (``method_overrides``).

    :param protocol: a report's ``protocol``: ``stream`` (a split's ``protocol``:
        ``train_sizes``, ``test_sizes``, and ``major``/``minor`` for imbalanced streams,
        ``blurry``) or those keys at its top level, ``lr``, ``n_iter``, ``buffer_sizes``,
        and optionally ``seeds``, ``batch_size``, ``replay_batch_size``,
        ``method_overrides``.
    :param prefix: the line's first words.
    :return: the line, or ``None`` when the protocol lacks the learning rate (nothing run).
    """
    if "lr" not in protocol or "n_iter" not in protocol:
        return None
    stream = protocol.get("stream") or protocol
    train, test = stream.get("train_sizes", []), stream.get("test_sizes", [])
    n_tasks = len(train) or stream.get("n_tasks", "?")
    if "major" in stream:
        samples = (f"{n_tasks} tasks, {stream['major']:,} training samples in the sequence's "
                   f"own task and {stream['minor']:,} in each other")
    else:
        samples = f"{n_tasks} tasks of {_sizes(train)} training samples"
    samples += f", {_sizes(test)} test samples per task"
    if stream.get("blurry"):
        samples += f", {stream['blurry'].get('keep', 0):.0%} of each task's samples kept (blurry)"
    sizes = protocol.get("buffer_sizes")
    parts = [samples, _setting_words("lr", protocol["lr"]),
             _setting_words("n_iter", protocol["n_iter"])]
    if sizes:
        parts.append("M = " + "/".join(map(str, sizes)))
    if "batch_size" in protocol and "replay_batch_size" in protocol:
        parts.append(replay_words(protocol["batch_size"], protocol["replay_batch_size"]))
    elif "batch_size" in protocol:
        parts.append(f"batches of {protocol['batch_size']}")
    seeds = protocol.get("seeds")
    if seeds:
        parts.append(("seeds " if len(seeds) > 1 else "seed ") + " ".join(map(str, seeds)))
    overrides = [f"{method}: " + ", ".join(_setting_words(k, v) for k, v in o.items())
                 for method, o in (protocol.get("method_overrides") or {}).items() if o]
    line = prefix + "; ".join(parts) + "."
    if overrides:
        line += " Methods with their own settings (the authors' scripts): " \
                + "; ".join(overrides) + "."
    return line


def replay_words(batch_size: object, replay_batch_size: object) -> str:
    """The batch sizes and the replay protocol they make, as a protocol line says them.

    A replay batch as large as the incoming one is the GSS paper's protocol (and
    Avalanche's default); most online papers since 2022 replay 64 against incoming batches
    of 10. Results are comparable only under the same one, so every output names it.

    :param batch_size: the incoming batch size (``None``: the runs differ).
    :param replay_batch_size: buffer samples per replay step (``None``: the runs differ).
    """
    if batch_size is None or replay_batch_size is None:  # rows of their own set them apart
        return "batch and replay batch sizes as each row's settings say"
    words = f"batches of {batch_size}, replay batches of {replay_batch_size}"
    if replay_batch_size == batch_size:
        return words + " (as many as it takes in: the GSS paper's replay protocol)"
    return words + (" (the GSS paper replays as many as it takes in; most online papers "
                    "since 2022 replay 64 against 10)")


def data_lines(report: ReportView) -> list[str]:
    """The Markdown lines that say what the data were: source, then how they were checked.

    :param report: a report with ``data_source`` and, optionally, ``data_verification``.
    """
    lines = [f"Data: {report['data_source']}", ""]
    if report.get("data_verification"):
        lines += [f"Data check: {report['data_verification']}.", ""]
    return lines


def shared_places(keys: Sequence[object]) -> list[str]:
    """Places in a ranking sorted best first, ties sharing theirs: ``["1", "=2", "=2", "4"]``.

    :param keys: each entry's ranking key, in ranking order; equal keys tie.
    """
    keys = list(keys)
    return [("=" if keys.count(key) > 1 else "") + str(keys.index(key) + 1) for key in keys]


def _mark(row: ReportView) -> str:
    """``‡`` for a row with a diverged run, ``†`` for one that skipped steps, else ``""``."""
    if any(row.get("diverged", [])):
        return " ‡"
    if any(row.get("skipped_steps", [])):
        return " †"
    return ""


def format_cell(mean: float, std: float | None) -> str:
    """``"82.6 ± 2.9"``, or just the mean when there is no deviation (one seed: ``None``)."""
    if std is None or math.isnan(std):
        return f"{mean:.1f}"
    return f"{mean:.1f} ± {std:.1f}"


_VARIANT_NOTES = {
    "GSS-Greedy": "batch-level gate, mini-batch buffer gradients, min-max draw",
    "GSS-Clust": "threshold growth 1.01 instead of doubling",
    "FSS-Clust": "logits and squared distances instead of the penultimate layer",
}
"""What the authors' variant of each method changes, for the tables' notes."""


def _legend(columns: Sequence[tuple[str, object]], row_key: str, avg: bool) -> str:
    """One line naming what the table's rows and columns are."""
    what = {"buffer_size": "M=m: a memory (buffer) of m samples",
            "sequence": "Seqk: Table 4's imbalanced sequence k (task k has the most samples)"
            }.get(row_key, f"{row_key}=v: runs with {row_key} v")
    text = ("Rows: methods, with their variant, retrieval or update in parentheses where "
            "there are several; columns: " + (what if columns else "none"))
    if avg:
        text += "; Avg: the mean over those columns, ± the std across them"
    return text + "."


def _row_label(row: ReportView) -> str:
    """A row's method, with its variant, update and retrieval in parentheses."""
    tags = [str(row[k]) for k in ("variant", "update", "retrieval", "options") if k in row]
    return str(row["method"]) + (f" ({', '.join(tags)})" if tags else "")


def _explained(report: ReportView, paper: bool) -> str:
    """What the rows' tags mean (variants, retrievals), for those the table has."""
    rows = report["rows"]
    authors = [m for m in _VARIANT_NOTES if any(r["method"] == m and r.get("variant") ==
                                                "authors" for r in rows)]
    cb_gss = [r for r in rows if r["method"] == "CB-GSS"]
    return (
        (" (paper): the method as the paper writes it." if any(
            r.get("variant") == "paper" for r in rows) else "")
        + (" (authors): as the authors' code does it (" + "; ".join(
            f"{m}: {_VARIANT_NOTES[m]}" for m in authors) + ")." if authors else "")
        + (" (mir): replay batches chosen by Maximally Interfered Retrieval (Aljundi, "
           "Caccia et al., NeurIPS 2019) among "
           f"{report['protocol'].get('mir_candidates', 50)} random buffer samples, instead of "
           "drawn uniformly" + ("; a paper number beside it is the method's with uniform "
                                "draws" if paper else "") + "."
           if any(r.get("retrieval") == "mir" for r in rows) else "")
        + (" (other-classes): each replay step draws the buffer samples whose class the "
           "incoming batch does not hold first." if any(
               r.get("retrieval") == "other-classes" for r in rows) else "")
        + (" CB-GSS replays the classes the incoming batch does not hold first (its own "
           "retrieval)." if any("retrieval" not in r for r in cb_gss) else "")
        + (" CB-GSS (random): CB-GSS with the paper's uniform replay draws."
           if any(r.get("retrieval") == "random" for r in cb_gss) else ""))


def _table_rows(report: ReportView, columns: Sequence[tuple[str, object]], row_key: str,
                paper: PaperCells, paper_avg: PaperAverages | None) -> tuple[list[str], bool]:
    """The table's lines: one per method (and tags), ours beside the paper's number.

    :return: the lines, and whether any cell shows a paper number.
    """
    rows = report["rows"]
    lines = []
    shown = False
    for method in dict.fromkeys(_row_label(r) for r in rows):
        cells = []
        for _, value in columns:
            match = [r for r in rows if _row_label(r) == method and r.get(row_key) == value]
            ours = (format_cell(match[0]["avg_mean"], match[0]["avg_std"]) + _mark(match[0])
                    if match else "-")
            ref = paper.get((method, value)) or paper.get(
                (match[0]["method"] if match else method, value))
            cells.append(ours + (f" ({format_cell(*ref)})" if ref else ""))
            shown = shown or bool(ref)
        if paper_avg is not None:  # mean over the columns; std across the columns' means
            means = [r["avg_mean"] for r in rows if _row_label(r) == method]
            ours = format_cell(statistics.fmean(means), _std(means)) if means else "-"
            ref = paper_avg.get(method.split(" (")[0])
            cells.append(ours + (f" ({format_cell(*ref)})" if ref else ""))
            shown = shown or bool(ref)
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines, shown


class ReproduceRecord(TypedDict):
    """One cell's reproduce test as a report's JSON records it (:func:`reproduce_tests`)."""

    row: str
    column: str
    ours_mean: float
    ours_sd: float | None
    ours_n: int
    paper_mean: float
    paper_sd: float | None
    paper_n: int
    difference: float
    ci95: list[float] | None
    t: float | None
    df: float | None
    p: float | None
    verdict: str
    test: str


def _test_json(row: str, column: str, test: ReproduceTest) -> ReproduceRecord:
    """A :class:`ReproduceTest` of cell ``(row, column)`` as a report's JSON records it."""
    return {"row": row, "column": column, "ours_mean": test.ours_mean,
            "ours_sd": test.ours_sd, "ours_n": test.ours_n, "paper_mean": test.paper_mean,
            "paper_sd": test.paper_sd, "paper_n": test.paper_n,
            "difference": test.difference,
            "ci95": None if test.low is None or test.high is None else [test.low, test.high],
            "t": test.t, "df": test.df, "p": test.p, "verdict": test.verdict,
            "test": test.test}


def reproduce_tests(report: ReportView, columns: Sequence[tuple[str, object]], row_key: str,
                    paper: PaperCells, paper_avg: PaperAverages | None = None
                    ) -> list[ReproduceRecord]:
    """Each cell the paper has, ours against it (:func:`.paper.reproduce_test`).

    A cell's values are our seeds' averages; an ``Avg`` cell's are the row's column means
    against the paper's average over its own columns (the columns are the samples on both
    sides: ``paper_n`` is how many columns the paper has for the method).

    :param report: the report's JSON object (``rows``).
    :param columns: the table's columns as ``(label, value of row_key)``.
    :param row_key: the row key the columns range over.
    :param paper: the paper's cells, keyed ``(method, column value)``.
    :param paper_avg: the paper's averages by method, where the table has an ``Avg``.
    :return: one object per tested cell, in table order: ``row`` (the row's label),
        ``column`` (its label), then the test's keys (``ours_mean``, ``ours_sd`` (sample
        sd), ``ours_n``, ``paper_mean``, ``paper_sd``, ``paper_n``, ``difference`` (ours −
        paper), ``ci95`` (``[low, high]`` or ``None``), ``t``, ``df``, ``p``, ``verdict``,
        ``test``: ``"welch"``, or ``"one run"`` where the paper gives no spread).
    """
    rows = report["rows"]
    tests: list[ReproduceRecord] = []
    for label in dict.fromkeys(_row_label(r) for r in rows):
        mine = [r for r in rows if _row_label(r) == label]
        for column, value in columns:
            match = [r for r in mine if r.get(row_key) == value]
            if not match:
                continue
            ref = paper.get((label, value)) or paper.get((match[0]["method"], value))
            if ref:
                tests.append(_test_json(label, column,
                                        reproduce_test(match[0]["avg"], ref[0], ref[1])))
        ref = paper_avg.get(label.split(" (")[0]) if paper_avg else None
        if ref and mine:
            n_paper = sum(1 for method, _ in paper if method == label.split(" (")[0])
            tests.append(_test_json(label, "Avg", reproduce_test(
                [r["avg_mean"] for r in mine], ref[0], ref[1], paper_n=max(n_paper, 2))))
    return tests


def _signed(value: float) -> str:
    """``"+1.2"`` / ``"−3.4"``: a difference with its sign."""
    return f"{'+' if value >= 0 else '−'}{abs(value):.1f}"


def reproduce_lines(tests: Sequence[ReproduceRecord]) -> list[str]:
    """The Markdown of :func:`reproduce_tests`: a legend saying what the test is, a table.

    :param tests: :func:`reproduce_tests`' objects; none gives no lines.
    """
    if not tests:
        return []
    lines = ["", f"Reproduce test: each cell the paper has, ours − paper with its 95 % "
             f"interval, by Welch's two-sample t-test at {REPRODUCE_ALPHA} (Welch–"
             f"Satterthwaite degrees of freedom), taking the paper's ± as the standard "
             f"deviation over its {PAPER_SEEDS} seeds and ours as the sample standard "
             f"deviation (n − 1) over our seeds: \"reproduces\" when p ≥ {REPRODUCE_ALPHA} "
             f"(the interval holds 0), \"does not reproduce\" when p < {REPRODUCE_ALPHA}, "
             f"\"n/a\" with fewer than two of our seeds. Avg: the columns are the "
             f"samples on both sides. Where the paper gives no spread it reports one run "
             f"(n=1): Student's t with that run as a sample of one and our sample standard "
             f"deviation for both sides (df = n − 1), i.e. whether the paper's run lies in "
             f"the 95 % prediction interval of one more run of ours.",
             "", "| method | column | ours (sample sd, n) | paper (sd, n) | ours − paper "
             "[95 % interval] | p | verdict |", "|---|---|---|---|---|---|---|"]
    for t in tests:
        ours = format_cell(t["ours_mean"], t["ours_sd"]) + f" (n={t['ours_n']})"
        theirs = format_cell(t["paper_mean"], t["paper_sd"]) + f" (n={t['paper_n']})"
        diff = _signed(t["difference"])
        if t["ci95"] is not None:
            diff += f" [{_signed(t['ci95'][0])}, {_signed(t['ci95'][1])}]"
        p = "-" if t["p"] is None else (f"{t['p']:.3f}" if t["p"] >= 0.001 else "<0.001")
        lines.append(f"| {t['row']} | {t['column']} | {ours} | {theirs} | {diff} | {p} | "
                     f"{t['verdict']} |")
    return lines


def _notes(report: ReportView) -> list[str]:
    """The deviations, the task-aware methods, and the rows with skipped steps."""
    lines: list[str] = []
    notes = report["protocol"].get("deviations", [])
    if report["protocol"].get("task_aware"):
        notes = [*notes, "Task-aware methods (given task boundaries): "
                 + ", ".join(report["protocol"]["task_aware"]) + "."]
    if notes:
        lines += ["", "Deviations from the paper's protocol:", ""] + [f"- {n}" for n in notes]
    marked = [r for r in report["rows"] if _mark(r)]
    if marked:
        lines += ["", "Skipped steps (a non-finite loss skips the step):", ""]
        for r in marked:
            runs = [f"seed {seed}: {n} skipped" + (" (diverged)" if d else "")
                    for seed, n, d in zip(r["seeds"], r["skipped_steps"], r["diverged"],
                                          strict=True) if n]
            lines.append(f"- {_row_label(r)}, M={r['buffer_size']}: " + "; ".join(runs))
        lines += ["", f"†: some steps were skipped; ‡: a run skipped more than "
                  f"{DIVERGED_SHARE:.0%} of its training iterations and diverged: its "
                  "accuracy says nothing about the method."]
    return lines + warning_lines(report["rows"],
                                 lambda r: f"{_row_label(r)}, M={r['buffer_size']}")


def table_markdown(report: ReportView, columns: Sequence[tuple[str, object]], row_key: str,
                   paper: PaperCells, paper_avg: PaperAverages | None = None, *,
                   command: bool = True) -> str:
    """A method × column table; each cell "ours (paper: x)" (see :func:`write_outputs`).

    :param report: the report's JSON object (:meth:`.report.Report.to_json`).
    :param columns: the table's columns as ``(label, value of row_key)``.
    :param row_key: the row key the columns range over.
    :param paper: the paper's cells, keyed ``(method, column value)``.
    :param paper_avg: when given, an ``Avg`` column with the paper's values by method.
    :param command: end with the command line (``False``: the caller adds more first).
    """
    n_seeds = max((len(r["seeds"]) for r in report["rows"]), default=0)
    cell_text = ("Each cell: our mean ± std over seeds" if n_seeds > 1
                 else "Each cell: our accuracy (one seed, so no spread)")
    table_rows, paper_shown = _table_rows(report, columns, row_key, paper, paper_avg)
    if paper_shown:  # only where some row has one: no legend for numbers no row shows
        cell_text += " (the paper's number in parentheses)"
    protocol = protocol_line(report["protocol"])
    lines = [
        f"# {report['experiment']}: {report['title']}",
        "",
        *data_lines(report),
        *([protocol, ""] if protocol else []),
        cell_text + "." + _explained(report, paper_shown),
        "",
        _legend(columns, row_key, paper_avg is not None),
        "",
        "| method | " + " | ".join(label for label, _ in columns)
        + (" | Avg |" if paper_avg is not None else " |"),
        "|---|" + "---|" * (len(columns) + (paper_avg is not None)),
        *table_rows,
        *reproduce_lines(reproduce_tests(report, columns, row_key, paper, paper_avg)),
        *_notes(report),
    ]
    if report.get("provenance"):
        lines += ["", provenance_line(report["provenance"])]
    if command:
        lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def write_text(path: str, text: str) -> None:
    """Write ``path`` atomically (a killed writer leaves the old file and no partial one).

    The write goes through a hidden ``.<name>.*.tmp`` file beside the file; such files
    that a killed write left, and that are an hour old (so that no other process is still
    writing them), are removed first. A ``path`` that is a symbolic link is refused.

    :param path: the file to (re)write.
    :param text: its content.
    :raises OSError: ``path`` is a symbolic link, or cannot be written: one line naming it.
    """
    replace_file(path, lambda f: f.write(text.encode()))


def output_paths(out: str, stem: str, *extensions: str) -> dict[str, str]:
    """``{ext: out/stem.ext}`` for each extension, in order; ``out`` is created."""
    os.makedirs(out, exist_ok=True)
    return {ext: os.path.join(out, f"{stem}.{ext}") for ext in extensions}


def write_report(paths: dict[str, str], report: ReportView, csv_text: str | None,
                 md: str) -> dict[str, str]:
    """Write a report's JSON, CSV and Markdown (each atomically) to ``paths``.

    :param paths: ``json``, ``csv`` (when ``csv_text`` is given) and ``md`` paths, and any
        other file already written (a figure), in the order they are listed.
    :param report: the JSON object.
    :param csv_text: the CSV, or ``None`` when the experiment wrote its own.
    :param md: the Markdown.
    :return: ``paths``.
    """
    write_text(paths["json"], json.dumps(report, indent=1))
    if csv_text is not None:
        write_text(paths["csv"], csv_text)
    write_text(paths["md"], md)
    return paths


def table_csv(report: ReportView) -> str:
    """A table's CSV: one line per run (see :func:`write_outputs`)."""
    n_tasks = max((len(a) for r in report["rows"] for a in r["task_accuracy"]), default=0)
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    extra = [k for k in ("sequence", "variant", "n", "batch_size", "update", "retrieval",
                         "options")
             if any(k in r for r in report["rows"])]
    steps = any("skipped_steps" in r for r in report["rows"])
    prov = report.get("provenance") or {}
    where = [prov.get("device"), prov.get("threads")] if prov else []
    protocol = report.get("protocol") or {}
    replay = [protocol["replay_batch_size"]] if "replay_batch_size" in protocol else []
    writer.writerow(["method", "buffer_size", *extra, *(["replay_batch_size"] if replay else []),
                     "seed", "avg",
                     *[f"T{k + 1}" for k in range(n_tasks)], "train_seconds",
                     *(["skipped_steps", "diverged"] if steps else []),
                     *(["device", "threads"] if prov else [])])
    for r in report["rows"]:
        n = len(r["seeds"])
        for i, (seed, accs, avg, secs) in enumerate(zip(r["seeds"], r["task_accuracy"],
                                                        r["avg"], r["train_seconds"],
                                                        strict=True)):
            skip = ([r.get("skipped_steps", [0] * n)[i], r.get("diverged", [False] * n)[i]]
                    if steps else [])
            writer.writerow([r["method"], r["buffer_size"], *[r.get(k) for k in extra], *replay,
                             seed,
                             f"{avg:.2f}", *[f"{a:.2f}" for a in accs], f"{secs:.2f}", *skip,
                             *where])
    return buffer.getvalue()


def write_outputs(report: ReportView, out_dir: str, *, columns: Sequence[tuple[str, object]],
                  row_key: str, paper: PaperCells, paper_avg: PaperAverages | None = None
                  ) -> dict[str, str]:
    """Write ``<experiment>.json``, ``.csv`` and ``.md`` into ``out_dir``, each atomically.

    :param report: the experiment's JSON object: ``experiment``, ``title``, ``dataset``,
        ``data_source``, ``command``, ``protocol``, ``rows`` (:func:`rows_from_runs`) and,
        optionally, ``provenance`` (:func:`provenance`).
    :param out_dir: destination folder (created if missing).
    :param columns: the markdown table's columns as ``(label, value of row_key)``.
    :param row_key: the row key the columns range over (``"buffer_size"``, ``"sequence"``).
    :param paper: the paper's cells, keyed ``(method, column value)``; give ``{}`` when the
        runs did not use the paper's data.
    :param paper_avg: when given, an ``Avg`` column (mean over the columns, std across
        them) with the paper's values by method.
    :return: the paths written, by extension.
    """
    paths = output_paths(out_dir, report["experiment"], "json", "csv", "md")
    return write_report(paths, report, table_csv(report),
                        table_markdown(report, columns, row_key, paper, paper_avg))
