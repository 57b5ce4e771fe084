"""An experiment of one's own whose ``render`` returns something else than a ``Rendered``
is refused in one line naming the experiment and what it returned, and writes nothing."""

from pathlib import Path

import pytest
from helpers.cli import cli, toy_npz

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_experiment.py"
RETURN = 'return Rendered("\\n".join(lines), table_csv(report.to_json()))'


@pytest.mark.slow
@pytest.mark.parametrize(("returned", "named"), [
    ('return "\\n".join(lines)', "render returned str, not a Rendered("),
    ('return Rendered(lines, table_csv(report.to_json()))',
     "render returned a Rendered whose markdown is list, not a Rendered("),
])
@pytest.mark.slow
def test_a_render_of_the_wrong_type_is_one_line_naming_the_experiment(tmp_path, returned,
                                                                      named):
    source = EXAMPLE.read_text()
    assert RETURN in source
    (tmp_path / "my_experiment.py").write_text(source.replace(RETURN, returned))
    data = toy_npz(tmp_path / "toy.npz")
    res = cli("--import", "my_experiment.py", "my-experiment", "--quick", "--data", data,
              "--out", "out", cwd=tmp_path, warm=True)
    assert res.returncode != 0
    line = res.stderr.strip().splitlines()[-1]
    assert line.startswith("python -m avalanche_gss.reproduce: error: experiment "
                           "'my-experiment': "), res.stderr
    assert named in line and "Traceback" not in res.stderr
    assert not list((tmp_path / "out").glob("my-experiment.*"))  # no report written
