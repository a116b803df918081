# The two set-up commands: `make test` and `make demo`. Both create/refresh .venv first.
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: setup test test-oldest test-ecosystem test-under-load bench demo notebooks lint format clean

setup:
	@bash scripts/bootstrap.sh

test: setup
	$(VENV)/bin/ruff check --no-cache .
	$(VENV)/bin/ruff format --check --no-cache .
	$(PY) -m pytest -q

# The whole suite with two CPU-bound busy processes beside it, as on a busy CI machine.
test-under-load: setup
	@bash scripts/under_load.sh $(PY) -m pytest -q

# The tests that run whole benchmarks, accuracy runs and notebooks for their figures (the
# benchmarks themselves: docs/benchmarks.md).
bench: setup
	$(PY) -m pytest -q -m bench

# The loader's tests with the oldest torch, torchvision and redis-py the package accepts
# (in .venv-oldest; CI runs it after `make test`).
test-oldest: setup
	@bash scripts/oldest.sh

# The tests with PyTorch Lightning, Hugging Face datasets and timm (in .venv-ecosystem, with the
# package's extras `[lightning,hf,timm]`; CI runs it after `make test-oldest`).
test-ecosystem: setup
	@bash scripts/ecosystem.sh

demo: setup
	$(PY) -m seneca demo

# Re-run every notebook at full size and save its outputs (about 30 minutes on 2 cores).
notebooks: setup
	$(PY) scripts/run_notebooks.py --size full

lint: setup
	$(VENV)/bin/ruff check --no-cache .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-oldest .venv-ecosystem data/demo .pytest_cache .ruff_cache
