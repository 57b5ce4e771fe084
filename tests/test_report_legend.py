"""A table's legend speaks of the paper's numbers only when some row shows one."""

from test_reporting import run, write

from avalanche_gss.reproduce.reports.writing import rows_from_runs

PAPER = {("Rand", 300): (37.5, 1.3)}
PAPER_AVG = {"Rand": (40.0, None)}


def test_no_row_with_a_paper_number_no_word_of_them_in_the_legend(tmp_path):
    # The paper has numbers, but for none of the table's rows
    rows = rows_from_runs([({}, run(method="Reservoir", seed=0)),
                           ({}, run(method="Reservoir", seed=1)), ({}, run(method="CBRS"))])
    md = write(tmp_path, rows, paper=PAPER, paper_avg=PAPER_AVG)["md"]
    assert "paper's number" not in md and "a paper number" not in md
    assert "| Reservoir | 55.0 ± 0.0 | 55.0 |" in md and "(37.5" not in md


def test_a_row_with_a_paper_number_keeps_the_legend(tmp_path):
    rows = rows_from_runs([({}, run(method="Reservoir")), ({}, run(method="Rand"))])
    md = write(tmp_path, rows, paper=PAPER)["md"]
    assert "Each cell: our accuracy (one seed, so no spread) (the paper's number in " \
           "parentheses)." in md
    assert "| Rand | 55.0 (37.5 ± 1.3) |" in md
    # the Avg column's number alone is a paper number too
    md = write(tmp_path, rows_from_runs([({}, run(method="Rand", m=200))]),
               columns=[("M=200", 200)], paper=PAPER, paper_avg=PAPER_AVG)["md"]
    assert "(the paper's number in parentheses)" in md and "| Rand | 55.0 | 55.0 (40.0) |" in md
