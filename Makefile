# Two entry points for a fresh machine; each installs what it needs into .venv.
#   make demo   tune the built-in gpt-mini workload and write plan.json + report.html
#   make test   run the whole test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: demo test install clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	bash scripts/install.sh $(PYTHON) $(VENV)
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/torchsmith tune --budget 3m --out plan.json --report report.html

# The checks first (seconds), then the suite: layers point one way, lint, types, tests.
test: install
	bash scripts/install_test_tools.sh
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) plan.json report.html
