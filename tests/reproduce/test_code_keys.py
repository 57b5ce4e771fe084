"""A run's cache key holds the code of one's own that is that run's code, by module name: the
modules of its method and its stream, and every module of one's own they import, at the top
or inside a function; not the other ``--import`` modules, and no path, so that moving the
folder keeps every key."""

import hashlib
import json
import re
import shutil
import sys

import pytest
from helpers.cli import cli, toy_npz
from helpers.policy import write_policy

from avalanche_gss.reproduce.runs import identity, own_code
from avalanche_gss.reproduce.runs.cache import config_key, module_sha256, result_config

LAZY = '''
    def _assign(self, rows, model):
        from newest_lazy_rule import NEWEST  # imported when a run first stores a batch

'''


def _lazy_policy(folder, module="newest_lazy", name="Newest"):
    """A policy whose buffer imports its rule lazily, from ``newest_lazy_rule`` beside it."""
    path = write_policy(folder, module, name=name)
    text = path.read_text().replace("NEWEST = True  # False: the first samples stay instead\n",
                                    "")
    path.write_text(text.replace("\n    def _assign(self, rows, model):\n", LAZY))
    (folder / "newest_lazy_rule.py").write_text("NEWEST = True\n")
    return path


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_helper_imported_inside_a_method_is_in_the_key_before_it_is_imported(tmp_path,
                                                                             registry):
    path = _lazy_policy(tmp_path)
    own_code.import_user(str(path))
    assert "newest_lazy_rule" not in sys.modules  # not imported: no run called it yet
    code = identity.method_code("Newest")
    assert code["user_code"] == {"newest_lazy": _sha(path),
                                 "newest_lazy_rule": _sha(tmp_path / "newest_lazy_rule.py")}
    # A worker that starts the job checks the helper's file too, imported or not
    identity.prepare_job(code)
    with pytest.raises(ValueError, match="code of newest_lazy_rule changed during the sweep"):
        identity.prepare_job({**code, "user_code": {**code["user_code"],
                                                  "newest_lazy_rule": "0" * 64}})


def test_every_import_statement_of_ones_own_counts_and_installed_ones_do_not(tmp_path,
                                                                             registry):
    pkg = tmp_path / "newest_pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "main.py").write_text(
        "import os\nimport torch\n\n\ndef f():\n    from . import beside\n"
        "    from .sub.deep import X\n    import newest_top\n    return X\n")
    (pkg / "beside.py").write_text("")
    (pkg / "sub" / "deep.py").write_text("X = 1\n")
    (pkg / "unused.py").write_text("")
    (tmp_path / "newest_top.py").write_text("from newest_pkg import beside\n")
    sys.path.insert(0, str(tmp_path))
    try:
        found = own_code.own_imports(["newest_pkg.main"])
    finally:
        sys.path.remove(str(tmp_path))
    assert sorted(found) == ["newest_pkg", "newest_pkg.beside", "newest_pkg.main",
                             "newest_pkg.sub", "newest_pkg.sub.deep", "newest_top"]
    assert found["newest_pkg.sub.deep"] == str(pkg / "sub" / "deep.py")
    assert "newest_pkg" not in sys.modules  # read, never run


def test_editing_one_import_retrains_only_the_runs_whose_code_it_is(tmp_path, registry):
    # Given two --import modules: a policy, and a second policy the runs below do not use
    path = _lazy_policy(tmp_path)
    other = write_policy(tmp_path, "newest_other", name="Other")
    own_code.import_user(str(path))
    own_code.import_user(str(other))
    before = {m: {**identity.code_identity(), **identity.method_code(m)}
              for m in ("Newest", "Reservoir")}
    assert "user_code" not in before["Reservoir"]
    # Then no key holds a path, only module names and hashes
    for config in before.values():
        assert str(tmp_path) not in json.dumps(result_config(config))
    # When the other module changes (a process that imports it afresh)
    other.write_text(other.read_text().replace("NEWEST = True", "NEWEST = False"))
    module_sha256.cache_clear()
    after = {m: {**identity.code_identity(), **identity.method_code(m)}
             for m in ("Newest", "Reservoir")}
    # Then neither the policy's runs nor the built-in method's are new
    assert {m: config_key(c) for m, c in after.items()} == {
        m: config_key(c) for m, c in before.items()}


def _counts(stderr):
    done, todo = re.search(r"(\d+) already done, (\d+) to run", stderr).groups()
    return int(done), int(todo)


@pytest.mark.slow
def test_the_command_retrains_what_an_edit_changes_and_nothing_when_moved(tmp_path):
    # Given a policy whose buffer imports its rule lazily, a built-in policy beside it,
    # and the data and cache outside the folder that holds the code
    code = tmp_path / "code"
    code.mkdir()
    path = _lazy_policy(code)
    data = toy_npz(tmp_path / "toy.npz")
    args = ["which-buffer", "--quick", "--data", data, "--import", path.name, "--policies",
            "Newest", "Reservoir", "--streams", "disjoint", "--cache", tmp_path / "cache",
            "--out", "out"]

    def run(folder):
        res = cli(*args, cwd=folder, warm=True)
        assert res.returncode == 0, res.stderr
        return _counts(res.stderr)

    assert run(code) == (0, 2)
    assert run(code) == (2, 0)
    # When the lazily imported rule changes, the policy's run is new; Reservoir's is not
    (code / "newest_lazy_rule.py").write_text("NEWEST = False\n")
    assert run(code) == (1, 1)
    # When the --import file changes, likewise
    path.write_text(path.read_text() + "\n# an edit\n")
    assert run(code) == (1, 1)
    # And the folder moved elsewhere finds every run again
    moved = tmp_path / "moved"
    shutil.move(code, moved)
    assert run(moved) == (2, 0)


def test_a_stream_of_ones_own_keys_its_runs_by_the_module_that_builds_it(tmp_path, registry):
    from avalanche_gss.streams import REGISTRY

    (tmp_path / "newest_stream.py").write_text(
        "from avalanche_gss.streams import REGISTRY, StreamDefinition, register_stream\n\n\n"
        "def build(data, *, seed, **options):\n"
        "    from newest_lazy_rule import NEWEST\n"
        "    return REGISTRY['disjoint'].build(data, seed=seed, **options)\n\n\n"
        "register_stream('newest-stream', StreamDefinition(build, 'mine', "
        "dict(REGISTRY['disjoint'].options)))\n")
    (tmp_path / "newest_lazy_rule.py").write_text("NEWEST = True\n")
    try:
        own_code.import_user(str(tmp_path / "newest_stream.py"))
        code = identity.run_code("Reservoir", "newest-stream")
        assert sorted(code["user_code"]) == ["newest_lazy_rule", "newest_stream"]
        assert "user_code" not in identity.run_code("Reservoir", "disjoint")
    finally:
        REGISTRY.remove("newest-stream")
