# Two commands for a new user; each creates .venv and installs what it needs when missing.
#   make demo   train the digits recipes end to end (one process, then two through the composer launcher),
#               then the example user package of examples/text-classification, and audit its ledger
#   make test   ruff check and the whole test suite, launcher tests included
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup demo test bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,demo]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) scripts/train.py yamls/digits.yaml
	$(VENV)/bin/composer -n 2 scripts/train.py yamls/digits-grad-accum.yaml
	$(VENV)/bin/composer -n 2 scripts/train.py yamls/custom-batch-sampler.yaml
	$(VENV)/bin/composer -n 2 scripts/train.py yamls/mixture.yaml
	rm -rf runs/text-classification  # a fresh run folder: audit accounts for one run at a time
	PYTHONPATH=examples/text-classification $(VENV)/bin/composer -n 2 -m composer_sampling.train \
		examples/text-classification/recipe.yaml
	$(VENV)/bin/composer-sampling audit runs/text-classification

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest
