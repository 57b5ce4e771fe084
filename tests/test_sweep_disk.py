"""A sweep that cannot store a finished result keeps it: a full disk, a read-only or foreign
cache folder is a one-line warning naming the file, never a lost result."""

import errno
import os
import warnings

import pytest
from helpers import importable_module

from avalanche_gss.reproduce.runs import cache as cache_module
from avalanche_gss.reproduce.runs import sweep
from avalanche_gss.reproduce.runs.sweep import ResultCache, config_key, run_sweep

JOB_MODULE = '''
def square(config):
    return {"i": config["i"], "square": config["i"] ** 2}
'''


@pytest.fixture
def jobs_module(tmp_path, monkeypatch):
    """An importable job module (spawned workers import it too)."""
    return importable_module(tmp_path, monkeypatch, "disk_jobs", JOB_MODULE)


def _uncached(caught):
    return [str(w.message) for w in caught if issubclass(w.category, sweep.UncachedResultWarning)]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_result_that_cannot_be_cached_is_kept_and_the_file_named(tmp_path, jobs_module,
                                                                   monkeypatch, code):
    # The disk fills (or turns read-only) while the results are written: the write itself
    # fails with an error that names no file, as a full disk's write() or fsync() does.
    def fail(path, write, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(cache_module, "atomic_write", fail)
    jobs = [{"i": i} for i in range(3)]
    cache = tmp_path / "cache"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_sweep(jobs, jobs_module.square, cache_dir=cache, progress=False)
    assert [r["square"] for r in results] == [0, 1, 4]  # nothing computed is thrown away
    messages = _uncached(caught)
    assert len(messages) == 3
    for job, message in zip(jobs, messages, strict=True):
        assert "\n" not in message
        assert str(cache / f"{config_key(job)}.json") in message
        assert os.strerror(code) in message
    assert not list(cache.glob("*.json"))


def test_the_cache_names_the_entry_it_could_not_write(tmp_path, monkeypatch):
    def fail(path, write, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cache_module, "atomic_write", fail)
    store = ResultCache(tmp_path / "c")
    with pytest.raises(OSError) as info:
        store.put({"i": 1}, {"x": 1}, 0.1)
    assert info.value.errno == errno.ENOSPC
    assert info.value.filename == str(store.path({"i": 1}))
    assert str(store.path({"i": 1})) in str(info.value)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_entry_path_taken_by_a_folder_is_a_warning_in_workers_too(tmp_path, jobs_module,
                                                                     workers):
    # A real failure that holds for root too (no permission bits involved), in this process
    # or in a spawned worker: a folder where the entry would go, so os.replace fails.
    jobs = [{"i": i} for i in range(2)]
    cache = tmp_path / "cache"
    blocked = cache / f"{config_key(jobs[1])}.json"
    blocked.mkdir(parents=True)
    (blocked / "keep").write_text("")  # a non-empty folder: os.replace cannot take its place
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_sweep(jobs, jobs_module.square, cache_dir=cache, workers=workers,
                            progress=False)
    assert [r["square"] for r in results] == [0, 1]
    messages = _uncached(caught)
    assert len(messages) == 1 and str(blocked) in messages[0], messages
    assert ResultCache(cache).get(jobs[0]) == {"i": 0, "square": 0}  # the other is stored


def test_an_output_error_that_names_no_file_names_the_out_folder(capsys):
    from avalanche_gss.reproduce.reports.outputs import unwritten

    prog = "python -m reproduce"
    assert unwritten(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), "o", prog) == 1
    assert capsys.readouterr().err == (
        f"python -m reproduce: error: --out o: {os.strerror(errno.ENOSPC)}\n")
    named = OSError(errno.EISDIR, "cannot write o/t.json: Is a directory")  # the atomic writer's
    assert unwritten(named, "o", prog) == 1
    assert capsys.readouterr().err == (
        "python -m reproduce: error: cannot write o/t.json: Is a directory\n")
    with pytest.raises(OSError, match="not a disk error"):  # no file, no disk error: a bug
        unwritten(OSError(errno.EBADF, "not a disk error"), "o", prog)
