# Two commands for a new user; each creates .venv and installs what it needs when missing.
#   make demo   train the digits recipes end to end (one process, then two through the composer launcher),
#               then the example user package of examples/text-classification, and audit its ledger;
#               installs the package and its demo extra only (scikit-learn, for the digits)
#   make test   ruff, mypy and the whole test suite (launcher and llm-foundry tests included), the tests that
#               drive Composer again against the oldest Composer supported (0.29 with torch 2.6, in .venv-composer029),
#               and the order core, Lightning and Hugging Face tests on the newest torch without Composer
#               (.venv-lightning);
#               installs everything into the same .venv (a make demo after it installs nothing)
#   make test-fast  for the edit-test loop: ruff and every test but the launcher, llm-foundry and S3 tiers, in this
#               .venv only (CI runs make test)
# make test runs each tier in TEST_WORKERS processes (pytest-xdist; TEST_WORKERS=1 runs them in one), with one torch
# thread a process (tests/conftest.py). Measured on 2 cores, the tier neither launcher, llm-foundry nor S3 took 362 s
# in one process and 196 s in two; the oldest Composer's tier 117 s and 107 s. make test-oldest runs that tier alone.
# scripts/check_gpu.py (resume, FSDP2, the callbacks' cost, resume against the spin) is for a machine with a GPU, and
# is not part of make test. make gpu-rehearsal runs it on the CPU in .venv-gpu, a Python 3.12 environment holding the
# GPU machine's versions (scripts/gpu/image.txt: torch 2.11, numpy 2.5) and the wheels carried there
# (scripts/gpu/wheels.txt, Composer 0.32.1 among them, installed without dependencies by scripts/gpu/run_on_device.sh).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
DEMO_STAMP := $(VENV)/.installed-demo-stamp
OLDEST := .venv-composer029
OLDEST_STAMP := $(OLDEST)/.installed-stamp
LIGHTNING := .venv-lightning
LIGHTNING_STAMP := $(LIGHTNING)/.installed-stamp
TEST_WORKERS ?= 2
SLOW := launcher or llmfoundry or s3
# loadgroup: the tests sharing one resource run on one worker (tests/conftest.py's SHARED_RESOURCES)
XDIST := -n $(TEST_WORKERS) --dist loadgroup
# pip backtracks for a long time through llm-foundry's dependencies unless these two are bounded (kept for uv: the
# same versions as pip resolves)
PINS := 'protobuf>=4.25.1,<6' 'wandb<0.19'
# Each venv installs uv with its own pip, then its packages with uv: on the test environment of the oldest Composer,
# uv took 63 s where pip took 507 s, for the same versions. --no-cache leaves nothing outside the venv (the two
# venvs hold about 14 GB). uv writes no .pyc files (pip compiles every module at install, most of its time): each is
# written at its first import, so PYTHONDONTWRITEBYTECODE, set in some environments, is cleared for every command
# here; with it, each launched rank compiled Composer's imports again (25 s of CPU an import instead of 11).
UV := 'uv==0.13.9'
UV_FLAGS := --quiet --no-cache
export PYTHONDONTWRITEBYTECODE :=

GPU_VENV := .venv-gpu
GPU_STAMP := $(GPU_VENV)/.installed-stamp
# Python 3.12, as on the GPU machine: pyenv's when it has one, else python3.12 on the PATH. The GPU rehearsal needs
# it; the Lightning tests fall back to $(PYTHON), where Python 3.11.7 and older can hang a DataLoader worker at its
# fork (CPython gh-112275, docs/lightning.md).
FOUND_PYTHON312 := $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12))
PYTHON312 ?= $(or $(FOUND_PYTHON312),python3.12)
LIGHTNING_PYTHON ?= $(or $(FOUND_PYTHON312),$(PYTHON))

.PHONY: setup demo lint test test-slow test-oldest test-lightning test-fast gpu-rehearsal

# $(call install,VENV,ARGUMENTS[,PYTHON]): create VENV when missing (with PYTHON, default $(PYTHON)), install uv with
# its pip, then ARGUMENTS with uv.
define install
	test -x $(1)/bin/python || $(or $(3),$(PYTHON)) -m venv $(1)
	$(1)/bin/python -m pip install --quiet $(UV)
	$(1)/bin/uv pip install $(UV_FLAGS) --python $(1)/bin/python $(2)
endef
EVERYTHING := -e '.[test,demo,llmfoundry]' $(PINS)
OLDEST_COMPOSER := -e '.[test]' 'mosaicml==0.29.0' 'torch==2.6.0' 'torchvision==0.21.0'

$(STAMP): pyproject.toml
	$(call install,$(VENV),$(EVERYTHING))
	touch $(STAMP) $(DEMO_STAMP)  # everything holds the demo's extra

$(DEMO_STAMP): pyproject.toml
	$(call install,$(VENV),-e '.[demo]')
	touch $(DEMO_STAMP)

$(OLDEST_STAMP): pyproject.toml
	$(call install,$(OLDEST),$(OLDEST_COMPOSER))
	touch $(OLDEST_STAMP)

$(GPU_STAMP): scripts/gpu/image.txt
	$(call install,$(GPU_VENV),-r scripts/gpu/image.txt,$(PYTHON312))
	touch $(GPU_STAMP)

setup: $(STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/composer-sampling train yamls/digits.yaml
	$(VENV)/bin/composer -n 2 -m composer_sampling.train yamls/digits-grad-accum.yaml
	$(VENV)/bin/composer -n 2 -m composer_sampling.train yamls/custom-batch-sampler.yaml
	$(VENV)/bin/composer -n 2 -m composer_sampling.train yamls/mixture.yaml
	rm -rf runs/text-classification  # a fresh run folder: audit accounts for one run at a time
	PYTHONPATH=examples/text-classification $(VENV)/bin/composer -n 2 -m composer_sampling.train \
		examples/text-classification/recipe.yaml
	$(VENV)/bin/composer-sampling audit runs/text-classification

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The order core, Lightning, a loop written by hand and the Hugging Face Trainer on the newest torch, without
# Composer: pytorch-lightning 2.6, transformers 5.25 and accelerate 1.16 (the transformers extra), torch 2.15, the
# test-core extra. Test modules that need Composer are skipped at collection (conftest.py). The core's tests that call
# torch (the order, the samplers) run here, and the composer-sampling command as a Lightning user installs it
# (tests/cli: audit, docs and --help without Composer, omegaconf or tabulate); the graph walk, the proofs and the
# doctests, which do not depend on torch's version, run in .venv only, to keep make test within its time. The Hugging
# Face adapter and its tests (doctests included) are collected only here, where its tested transformers is installed
# (conftest.py): Composer's environments hold older ones.
LIGHTNING_ENV := -e '.[lightning,transformers,test-core]' 'torch==2.15.*'
LIGHTNING_TESTS := tests/lightning tests/loop tests/transformers composer_sampling/transformers tests/order \
	tests/samplers tests/cli tests/test_core_without_composer.py

$(LIGHTNING_STAMP): pyproject.toml
	$(call install,$(LIGHTNING),$(LIGHTNING_ENV),$(LIGHTNING_PYTHON))
	touch $(LIGHTNING_STAMP)

test-lightning: $(LIGHTNING_STAMP)
	$(LIGHTNING)/bin/python -m pytest -q $(LIGHTNING_TESTS) -m 'not (s3 or llmfoundry)' $(XDIST)

test-oldest: $(OLDEST_STAMP)
	$(OLDEST)/bin/python -m pytest -m composer -q $(XDIST)

test-slow: $(STAMP)
	$(PY) -m pytest -m '($(SLOW)) and not (lightning or transformers)' $(XDIST)

# The three environments install side by side. Then mypy, which uses one core, runs beside the launcher, llm-foundry
# and S3 tier, whose launched ranks leave about a quarter of both cores idle (measured on 2 cores: 405 s for both,
# against 58 s and about 380 s one after the other). Then the rest of .venv's tests, in two processes: every test of
# .venv in one pytest run took as long as the two tiers one after the other (648 s against 657 s). Last, the oldest
# Composer's tests and the Lightning tests side by side, one process each, which saves each tier's second collection
# and the wait for its last test (124.8 s and 117.9 s, against 129.5 s and 131.9 s one after the other, in two
# interleaved rounds). --output-sync prints each target's output whole, when it ends.
test:
	$(MAKE) --no-print-directory -j3 $(STAMP) $(OLDEST_STAMP) $(LIGHTNING_STAMP)
	$(MAKE) --no-print-directory -j2 --output-sync=target lint test-slow
	$(PY) -m pytest -m 'not ($(SLOW) or lightning or transformers)' $(XDIST)
	$(MAKE) --no-print-directory -j2 --output-sync=target test-oldest test-lightning XDIST=

test-fast: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q -m 'not ($(SLOW) or lightning or transformers)' $(XDIST)

# The GPU check rehearsed on the CPU, on the GPU machine's Python, torch and numpy, through the command that runs it
# there (the carried wheels installed without dependencies); its table on stdout, its JSON in a new temporary folder.
gpu-rehearsal: $(GPU_STAMP)
	PYTHON=$(GPU_VENV)/bin/python scripts/gpu/fetch_wheels.sh
	OUT=$$(mktemp -d -t gpu-rehearsal-XXXXXX) PYTHON=$(GPU_VENV)/bin/python scripts/gpu/run_on_device.sh --device cpu
