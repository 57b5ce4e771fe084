# Two commands set everything up on a fresh machine (README): `make reproduce` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: reproduce test quality bench mutation clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,cluster]"
	touch $(STAMP)

reproduce: $(STAMP)
	$(PY) -m reproduce table1 --quick --out results/quick

test: $(STAMP)
	$(VENV)/bin/ruff check avalanche_gss reproduce benchmarks tests
	$(VENV)/bin/mypy avalanche_gss
	$(PY) -m pytest -q

quality: $(STAMP)
	$(VENV)/bin/ruff check avalanche_gss reproduce benchmarks tests
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

clean:
	rm -rf $(VENV) results .pytest_cache mutants
