"""A stream of one's own is one file: ``examples/gradual_stream.py``, copied outside the
repository and run with the command its first lines give, is a which-buffer stream by
name, built in the runs, named in the report and in each run's cache key."""

import json
import re
from pathlib import Path

import pytest
from helpers.cli import cli
from helpers.cli import first_lines_command as _command

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gradual_stream.py"



@pytest.mark.slow
def test_the_gradual_stream_example_runs_by_name_with_the_command_it_gives(tmp_path):
    (tmp_path / "gradual_stream.py").write_text(EXAMPLE.read_text())
    args = _command(EXAMPLE.read_text())
    assert args[:3] == ["avalanche-gss", "--import", "gradual_stream.py"]
    assert "--streams" in args and args[args.index("--streams") + 1] == "gradual"
    # Without the file the name is unknown, in one line naming the choices
    refused = cli(*args[3:], cwd=tmp_path)
    assert refused.returncode == 2 and "'gradual'" in refused.stderr
    assert "'blurry'" in refused.stderr
    out = tmp_path / args[args.index("--out") + 1]
    res = cli(*args[1:], cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr
    md = (out / "which_buffer.md").read_text()
    assert "| policy | gradual M=100 |" in md
    assert re.search(r"^- gradual \(class-disjoint tasks.*drifts into the next over 50%", md,
                     re.M)
    (stream,) = json.loads((out / "which_buffer.json").read_text())["protocol"]["streams"]
    assert stream["name"] == "gradual" and stream["family"] == "gradual"
    assert stream["stream"]["gradual"]["window"] == 0.5
    assert stream["stream"]["gradual"]["blended_per_boundary"] == [12] * 4  # 50 per task
    configs = [json.loads(p.read_text())["config"]
               for p in (out / "cache" / "which-buffer").glob("*.json")]
    assert len(configs) == 2  # Reservoir and CBRS, one seed, one M
    for config in configs:  # the stream's name and options are part of each run's key
        assert config["stream"] == "gradual" and config["stream_options"]["window"] == 0.5
        # not where the file is (moving the folder keeps the key), nor its hash: the code
        # that builds the stream is the package's, the window an option
        assert not {"imports", "user_code"} & set(config)
