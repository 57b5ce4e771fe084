"""A buffer policy with options is one file: the user guide's ``stride.py`` (the shipped
``examples/stride_policy.py``), written outside the repository, loaded with ``--import`` and
run by name with both of its options from the command line, which reach its buffer (its
``report()`` says so in the run's extras)."""

import json

import pytest
from helpers.cli import cli, toy_npz
from helpers.docs import REPO, guide_page, rst_code_blocks, rst_section
from helpers.policy import write_policy


def _stride_file() -> str:
    """The text of ``stride.py`` as the user guide's "Extending" page shows it."""
    section = rst_section(guide_page("extending"), "A policy")
    (block,) = rst_code_blocks(section, "python")
    return block


@pytest.mark.reads_source
def test_the_guides_stride_py_is_the_shipped_example():
    # The page shows the file that ships, whole: the two cannot drift apart
    assert _stride_file() == (REPO / "examples" / "stride_policy.py").read_text()


@pytest.mark.slow
def test_a_policy_file_with_two_options_runs_by_name_with_both(tmp_path):
    (tmp_path / "stride.py").write_text(_stride_file())
    # Beside it, a second module of one's own (imported by module name), a policy whose
    # name has a space, and a policy of the library's own
    write_policy(tmp_path, "newest_rows", name="Newest rows")
    data = toy_npz(tmp_path / "toy.npz")
    label = "Stride:stride=3,offset=5"
    res = cli("which-buffer", "--quick", "--data", data, "--import", "stride.py",
              "--import", "newest_rows", "--policies", label, "Newest rows", "Reservoir",
              "--streams", "disjoint", "--seeds", 0, "--buffer-sizes", 100, "--out", "out",
              cwd=tmp_path, warm=True)
    assert res.returncode == 0, res.stderr
    rows = json.loads((tmp_path / "out" / "which_buffer.json").read_text())["rows"]
    assert [r["policy"] for r in rows] == [label, "Newest rows", "Reservoir"]
    extras = rows[0]["extras"][0]
    assert (extras["stride"], extras["offset"]) == (3, 5)  # both options reached the buffer
    # and acted: samples 5, 8, 11, ... of the stream kept (82 of them: all fit)
    from avalanche_gss.reproduce.experiments.policies import QUICK

    per_task = QUICK["samples_per_task"]  # --quick's tasks, 5 of them
    kept = list(range(5, 5 * per_task, 3))[-100:]
    assert extras["buffer_task_counts"] == [sum(i // per_task == t for i in kept)
                                            for t in range(5)]
    assert extras["buffer_task_counts"][0] < extras["buffer_task_counts"][1]  # it strides
    # The other user policy is compared by name in every output
    lines = (tmp_path / "out" / "which_buffer.csv").read_text().splitlines()
    assert [line.split(",")[:2] for line in lines[2:]] == [["Newest rows", "Newest rows"],
                                                          ["Reservoir", "Reservoir"]]
    assert "| Newest rows |" in (tmp_path / "out" / "which_buffer.md").read_text()
    newest = range(5 * per_task - 100, 5 * per_task)  # the newest 100 samples
    assert rows[1]["extras"][0]["buffer_task_counts"] == [sum(i // per_task == t
                                                              for i in newest)
                                                          for t in range(5)]


@pytest.mark.slow
def test_an_option_the_buffer_lacks_is_refused_in_one_line_naming_the_allowed(tmp_path):
    (tmp_path / "stride.py").write_text(_stride_file())
    res = cli("which-buffer", "--import", "stride.py", "--policies",
              "Stride:stride=3,stop=5", "--streams", "disjoint", "--out", "out",
              cwd=tmp_path, warm=True)
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Stride has no option 'stop'; its options: stride, offset" in lines[0]
    assert not (tmp_path / "out").exists()


def test_a_policies_value_names_a_label_or_a_method_with_its_options(monkeypatch):
    from avalanche_gss.registry import Registry
    from avalanche_gss.reproduce.experiments import policies

    mine: Registry[policies.Policy] = Registry("which-buffer policy")
    for label, policy in policies.POLICIES.items():
        mine.add(label, policy, builtin=True)
    monkeypatch.setattr(policies, "POLICIES", mine)
    assert policies.policy_label("GSS-IQP") == "GSS-IQP"  # a label stays one
    text = "GSS-Clust: growth=1.5, recent_size=50,variant=paper ,replay.retrieval=mir"
    assert policies.policy_label(text, ("GSS-Clust",)) == text
    # Bare names are the buffer's options, PART.NAME the run's settings
    assert policies.POLICIES[text] == policies.Policy(
        "GSS-Clust", {"options": {"growth": 1.5, "recent_size": 50, "variant": "paper"},
                      "replay.retrieval": "mir"})
    for bad, words in (("Nope", ["'Nope'", "'Reservoir'", "METHOD:OPTION=VALUE"]),
                       ("Nope:a=1", ["'Nope'", "GSS-Clust"]),
                       ("GSS-Clust:growth", ["'growth'", "OPTION=VALUE"]),
                       ("GSS-Clust:a=1,a=2", ["'a=2'", "once"]),
                       ("GSS-Clust:a.b.c=1", ["'a.b.c=1'", "PART.SETTING=VALUE"]),
                       ("GSS-Clust:options=1", ["'options=1'", "other than method"])):
        with pytest.raises(ValueError) as err:
            policies.policy_label(bad, ("GSS-Clust",))
        assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), err
