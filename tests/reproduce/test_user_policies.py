"""Policies from user code: a buffer method and a which-buffer policy registered by a module
outside the package (``register``, ``register_policy``, an entry point, ``python -m
reproduce --import``), run by name, and cached under a key that holds the hash of the code
that ran, so that an edit of the policy is a new run and unchanged code a cached one.
which-buffer's run of such a policy, beside the README's ``stride.py``, is in
``test_toy_policy.py``."""

import hashlib
import json
import logging
import py_compile
import re
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from helpers.cli import cli as reproduce
from helpers.cli import subprocess_env, toy_npz
from helpers.policy import POLICY, write_policy
from helpers.warm import run as warm_python

from avalanche_gss import methods
from avalanche_gss.methods.spec import Method
from avalanche_gss.reproduce import cli
from avalanche_gss.reproduce.__main__ import main
from avalanche_gss.reproduce.experiments import policies
from avalanche_gss.reproduce.runs import own_code
from avalanche_gss.reproduce.runs import training as experiments
from avalanche_gss.reproduce.runs.cache import (
    config_key,
    module_sha256,
    package_sha256,
    source_sha256,
)
from avalanche_gss.reproduce.runs.identity import code_identity, method_code, prepare_job
from avalanche_gss.training import BufferStrategy

REPO = Path(__file__).resolve().parents[2]


def test_a_policy_of_ones_own_module_is_known_by_name_everywhere(tmp_path, registry):
    # Given a module outside the package that registers a method and a policy
    path = write_policy(tmp_path, "newest_named")
    with pytest.raises(SystemExit):
        cli.parse_args(["table1", "--methods", "Newest"])  # not known before
    # When it is imported as --import does
    own_code.import_user(str(path))
    # Then every list of names holds it, after this package's methods
    assert methods.names() == (*methods.NAMES, "Newest") == tuple(methods.REGISTRY)
    assert experiments.BUFFER_METHODS == methods.names()
    assert experiments.METHODS == (*methods.names(), *experiments.BASELINES) == cli.METHOD_NAMES
    assert "Newest" not in experiments.VARIANT_METHODS
    assert policies.POLICIES["Newest"] == policies.Policy("Newest")
    assert cli.parse_args(["table1", "--methods", "Newest"]).methods == ["Newest"]
    assert cli.parse_args(["which-buffer", "--policies", "Newest"]).policies == ["Newest"]
    assert experiments.RunSettings(method="Newest").retrieval == "random"
    # And what a run's key and its worker need of it: the module's hash and its import
    assert methods.get("Newest").code_modules() == ("newest_named",)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert method_code("Newest") == {"user_code": {"newest_named": digest},
                                     "imports": [str(path)]}
    # (a built-in method's run holds no code of one's own; its worker imports the module)
    assert method_code("Reservoir") == method_code("Single") == {"imports": [str(path)]}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_runs_key_holds_every_module_of_ones_own_its_code_imports(tmp_path, registry,
                                                                    monkeypatch):
    # Given a policy whose buffer takes its rule from a second module of one's own
    helper = tmp_path / "newest_rule.py"
    helper.write_text("NEWEST = True\n")
    path = write_policy(tmp_path, "newest_two_files")
    path.write_text(path.read_text().replace("NEWEST = True", "from newest_rule import NEWEST"))
    monkeypatch.syspath_prepend(str(tmp_path))
    own_code.import_user(str(path))
    # Then a run's key holds the hash of both: an edit of the second is a new run
    config = {**code_identity(), **method_code("Newest")}
    assert config["user_code"] == {"newest_two_files": _sha(path), "newest_rule": _sha(helper)}
    assert config["imports"] == [str(path)]
    # And a run of this package's own methods in that process does not: it is not their
    # code (its worker imports the module all the same, as this process did)
    builtin = {**code_identity(), **method_code("Reservoir")}
    assert "user_code" not in builtin and builtin["imports"] == [str(path)]
    # A process that imports the edited second module (module_sha256 is kept per process)
    # keys another run
    module_sha256.cache_clear()
    helper.write_text("NEWEST = False\n")
    assert method_code("Newest")["user_code"]["newest_rule"] == _sha(helper)
    assert config_key({**code_identity(), **method_code("Newest")}) != config_key(config)


def test_a_module_that_no_run_uses_is_imported_by_the_workers_but_keys_no_run(tmp_path,
                                                                            registry):
    # Given an --import module that registers nothing
    patch = tmp_path / "newest_patch.py"
    patch.write_text("from avalanche_gss.methods import reservoir\n")
    plain = code_identity()
    assert not {"user_code", "imports"} & set(plain)  # no code of one's own: the same key
    own_code.import_user(str(patch))
    # Then a worker imports it too, but it is no run's code: every key stays as it was
    patched = code_identity()
    assert "user_code" not in patched and patched["imports"] == [str(patch)]
    assert config_key(patched) == config_key(plain)
    assert own_code.user_modules() == ("newest_patch",)  # not this package's, nor torch


def test_a_module_of_ones_own_without_source_is_refused_in_one_line(tmp_path):
    # A .pyc without its .py, and a module in a zip file, have no source to hash
    (tmp_path / "mine_src.py").write_text("X = 1\n")
    py_compile.compile(str(tmp_path / "mine_src.py"), cfile=str(tmp_path / "mine_pyc.pyc"))
    (tmp_path / "mine_src.py").unlink()
    (tmp_path / "uses_pyc.py").write_text("import mine_pyc\n")
    with zipfile.ZipFile(tmp_path / "lib.zip", "w") as z:
        z.writestr("mine_zipped.py", "Y = 2\n")
    (tmp_path / "uses_zip.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), "
        "'lib.zip'))\nimport mine_zipped\n")
    for spec, module, file in (("uses_pyc.py", "mine_pyc", "mine_pyc.pyc"),
                               ("uses_zip.py", "mine_zipped", "lib.zip")):
        res = reproduce("table1", "--import", spec, "--help", cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        assert f"argument --import {spec}: module {module!r}" in lines[0]
        assert file in lines[0] and "no Python source file to hash" in lines[0]


def test_registering_refuses_taken_names_and_what_is_not_a_method(tmp_path, registry):
    class Strategy(BufferStrategy):
        buffer_class = methods.get("Rand").buffer

    for name in ("Reservoir", "GEM"):
        with pytest.raises(ValueError, match=f"{name!r} is taken by this package"):
            methods.register(Method(name, Strategy.buffer_class, Strategy))
    with pytest.raises(TypeError, match="Method, got dict"):
        methods.register({"name": "X"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="subclass of OnlineBuffer"):
        methods.register(Method("X", dict, Strategy))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'Reservoir' is taken by this package"):
        policies.register_policy("Reservoir", method="Rand")
    policies.register_policy("Rand x1", method="Rand", n_iter=1)
    policies.register_policy("Rand x1", method="Rand", n_iter=1)  # the same again: nothing
    with pytest.raises(ValueError, match="'Rand x1' is taken by another policy"):
        policies.register_policy("Rand x1", method="Rand", n_iter=2)
    with pytest.raises(ImportError, match="cannot import 'no_such_module'"):
        own_code.import_user("no_such_module")
    with pytest.raises(ImportError, match="no such file"):
        own_code.import_user(str(tmp_path / "absent.py"))


def _distribution(folder: Path, value: str) -> None:
    """An installed distribution, as pip leaves one: a dist-info folder with entry points."""
    info = folder / "ep_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[avalanche_gss.methods]\nEPNewest = {value}\n")


def test_an_installed_entry_point_adds_its_method(tmp_path, monkeypatch, registry, tiny_split):
    # Given a distribution on sys.path whose entry point names its module's method
    module = tmp_path / "ep_newest.py"
    module.write_text(POLICY.replace('register(Method("NAME"', 'METHOD = (Method("EPNewest"')
                      .replace('register_policy("NAME", method="NAME")', ""))
    _distribution(tmp_path, "ep_newest:METHOD")
    monkeypatch.syspath_prepend(str(tmp_path))
    methods._PLUGINS.clear()  # this process read the entry points before: read them again
    # When the names are asked for, the registry reads the entry points
    assert methods.names()[-1] == "EPNewest"
    assert "EPNewest" in experiments.BUFFER_METHODS and "EPNewest" in cli.METHOD_NAMES
    assert cli.parse_args(["table1", "--methods", "EPNewest"]).methods == ["EPNewest"]
    # Then it trains by name; a worker reads the entry point itself (nothing to import)
    result = experiments.run(experiments.RunSettings(method="EPNewest", buffer_size=20,
                                                     n_iter=1), tiny_split)
    assert sum(result.extras["buffer_class_counts"]) == 20
    assert method_code("EPNewest") == {"user_code": {"ep_newest": module_sha256("ep_newest")}}


def test_an_entry_point_that_names_no_method_is_refused_by_name(tmp_path, monkeypatch,
                                                               registry):
    (tmp_path / "ep_broken.py").write_text("THING = 3\n")
    _distribution(tmp_path, "ep_broken:THING")
    monkeypatch.syspath_prepend(str(tmp_path))
    methods._PLUGINS.clear()
    with pytest.raises(ImportError, match="entry point EPNewest = ep_broken:THING .*ep-plugin"
                                          ".*must name a Method"):
        methods.names()


def test_a_job_refuses_code_that_changed_since_its_key_was_made(tmp_path, registry):
    path = write_policy(tmp_path, "newest_job")
    own_code.import_user(str(path))
    config = {**code_identity(), **method_code("Newest")}
    prepare_job(config)  # the code the key names: ready
    with pytest.raises(ValueError, match="code of newest_job changed during the sweep"):
        prepare_job({**config, "user_code": {"newest_job": "0" * 64}})
    with pytest.raises(ValueError, match="code of avalanche_gss changed"):
        prepare_job({**config, "code_sha256": "0" * 64})


def test_a_run_is_keyed_to_the_torch_and_the_cpu_kind_it_computes_on():
    # Another torch or another CPU vector width can change a run's numbers: both are in
    # the key, and a worker on another one refuses the job in one line naming what differs
    config = code_identity()
    assert config["torch"] == torch.__version__
    assert config["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    prepare_job(config)
    here = torch.backends.cpu.get_cpu_capability()
    with pytest.raises(ValueError, match=f"cpu_capability {here} here, NEON in the run's key"):
        prepare_job({**config, "cpu_capability": "NEON"})
    with pytest.raises(ValueError, match=f"torch {re.escape(torch.__version__)} here, 1.0 in"):
        prepare_job({**config, "torch": "1.0"})
    keyless = {k: v for k, v in config.items() if k not in ("torch", "cpu_capability")}
    prepare_job(keyless)  # a config made without code_identity is not checked on them


def test_the_source_hash_follows_every_file_and_only_the_source(tmp_path):
    tree = tmp_path / "pkg"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("A = 1\n")
    (tree / "sub" / "b.py").write_text("B = 2\n")
    (tree / "notes.txt").write_text("not code")
    first = source_sha256(tree)
    assert source_sha256(tree) == first
    (tree / "notes.txt").write_text("still not code")
    assert source_sha256(tree) == first
    (tree / "sub" / "b.py").write_text("B = 3\n")
    assert source_sha256(tree) != first
    (tree / "sub" / "b.py").write_text("B = 2\n")
    (tree / "sub" / "b.py").rename(tree / "sub" / "c.py")
    assert source_sha256(tree) != first
    assert package_sha256() == source_sha256(REPO / "avalanche_gss")


def test_a_runs_key_holds_the_source_hash_and_no_revision():
    from avalanche_gss.reproduce.experiments.which_buffer import _jobs, plan

    args = cli.parse_args(["which-buffer", "--policies", "CB-GSS", "Reservoir",
                           "--streams", "disjoint", "--buffer-sizes", "100", "--seeds", "0"])
    runs, _ = plan(args)
    configs = [j.config() for j in _jobs(args, runs, "mnist", {})]
    for config in configs:
        assert config["code_sha256"] == package_sha256()
        assert not {"revision", "user_code", "imports"} & set(config)
    # The same code gives the same keys: results cached by this version stay valid
    assert [config_key(j.config()) for j in _jobs(args, runs, "mnist", {})] == list(
        map(config_key, configs))


# --------------------------------------------------------------------------- the CLI


def _sweep_counts(stderr: str) -> tuple[int, int]:
    done, todo = re.search(r"(\d+) already done, (\d+) to run", stderr).groups()
    return int(done), int(todo)


def _row(out: Path) -> dict:
    (row,) = json.loads((out / "table1.json").read_text())["rows"]
    return row


@pytest.mark.slow
def test_table1_runs_a_user_policy_by_name_and_again_when_its_code_changes(
        tmp_path, registry, monkeypatch, caplog):
    # Given a policy in a module of one's own, outside the package
    path = write_policy(tmp_path, "newest_policy")
    data = toy_npz(tmp_path / "toy.npz")
    args = ["table1", "--quick", "--data", data, "--import", path.name, "--methods",
            "Newest", "--seeds", 0, "--buffer-sizes", 100, "--out", "out"]
    # When it runs by name (the workers' own imports of a file given by name are
    # test_the_console_script_imports_from_the_current_folder_and_beside_a_file's)
    first = reproduce(*args, cwd=tmp_path, warm=True)
    assert first.returncode == 0, first.stderr
    assert _sweep_counts(first.stderr) == (0, 1)
    assert "Newest-M100-seed0: avg" in first.stderr  # logged by its run
    row = _row(tmp_path / "out")
    assert row["method"] == "Newest"
    # Newest keeps the last 100 of the 5 x 80 samples: 20 of task 4, task 5's 80
    assert row["extras"][0]["buffer_task_counts"] == [0, 0, 0, 20, 80]
    # Then the same code again is the cached run, here in this process: the key that the
    # command made in another process is the one this one makes
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="avalanche_gss.reproduce.runs.sweep"):
        assert main(list(map(str, args))) == 0
    assert _sweep_counts(caplog.text) == (1, 0)
    assert _row(tmp_path / "out") == row
    # And an edit of the policy is a new run, with the new policy's result
    path.write_text(path.read_text().replace("NEWEST = True", "NEWEST = False"))
    edited = reproduce(*args, cwd=tmp_path, warm=True)
    assert edited.returncode == 0, edited.stderr
    assert _sweep_counts(edited.stderr) == (0, 1)
    changed = _row(tmp_path / "out")
    assert changed["extras"][0]["buffer_task_counts"] == [80, 20, 0, 0, 0]  # the first 100
    assert changed["avg"] != row["avg"]


def test_a_module_that_exits_while_imported_ends_in_one_line(tmp_path, registry):
    # sys.exit() in the module: a failed import, exit status 2, not a silent success
    (tmp_path / "newest_quits.py").write_text("import sys\nsys.exit(0)\n")
    res = reproduce("table1", "--import", "newest_quits.py", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "argument --import newest_quits.py" in lines[0] and "sys.exit(0)" in lines[0]
    with pytest.raises(ImportError, match="it called sys.exit"):
        own_code.import_user(str(tmp_path / "newest_quits.py"))
    # Ctrl-C while it is imported stays Ctrl-C
    (tmp_path / "newest_stopped.py").write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        own_code.import_user(str(tmp_path / "newest_stopped.py"))


@pytest.mark.slow
def test_the_console_script_imports_from_the_current_folder_and_beside_a_file(tmp_path):
    # Given, in the folder it runs in, a module of one's own (imported by name), and in a
    # folder below, a policy file that imports a module beside it
    script = Path(sys.executable).with_name("avalanche-gss")
    if not script.exists():
        pytest.skip("the avalanche-gss command is not installed in this environment")
    write_policy(tmp_path, "newest_here", name="Here")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "newest_beside.py").write_text("NEWEST = True\n")
    path = write_policy(tmp_path / "sub", "newest_file", name="Beside")
    path.write_text(path.read_text().replace("NEWEST = True", "from newest_beside import NEWEST"))
    data = toy_npz(tmp_path / "toy.npz")
    # When the installed command runs both by name, in two worker processes (the script
    # forked from a warm interpreter, as its shebang's Python runs it: its own folder first
    # on sys.path, not the current one; its workers are spawned afresh as ever)
    res = warm_python(
        [script, "table1", "--quick", "--data", data, "--import", "newest_here",
         "--import", "sub/newest_file.py", "--methods", "Here", "Beside", "--seeds", "0",
         "--buffer-sizes", "100", "--workers", "2", "--out", "out"],
        tmp_path, subprocess_env(), timeout=600)
    # Then both are found, in the command and in its workers, as under python -m
    assert res.returncode == 0, res.stderr
    rows = {r["method"]: r for r in json.loads((tmp_path / "out" / "table1.json").read_text()
                                               )["rows"]}
    for name in ("Here", "Beside"):
        assert rows[name]["extras"][0]["buffer_task_counts"] == [0, 0, 0, 20, 80]


def test_a_module_that_cannot_be_imported_ends_in_one_line(tmp_path):
    (tmp_path / "newest_broken.py").write_text("raise RuntimeError('half written')\n")
    for spec, names in (("no_such_module", ["no_such_module", "PYTHONPATH"]),
                        ("newest_broken.py", ["newest_broken.py", "half written"])):
        res = reproduce("table1", "--import", spec, cwd=tmp_path)
        assert res.returncode == 2
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(
            "python -m avalanche_gss.reproduce: error: argument --import"), res.stderr
        assert all(name in lines[0] for name in names), lines[0]
