# Two entry points for a fresh machine; each installs what it needs into .venv.
#   make demo   tune the built-in gpt-mini workload and write plan.json + report.html
#   make test   run the whole test suite (what CI runs)
# And the inner loop while developing:
#   make test-fast   the same checks, then only the tests marked neither slow nor multiprocess
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
TEST_WORKERS ?= $(shell nproc 2>/dev/null || echo 2)

.PHONY: demo test test-fast check install clean

$(VENV)/.installed: pyproject.toml scripts/install.sh
	bash scripts/install.sh $(PYTHON) $(VENV)
	touch $@

install: $(VENV)/.installed

demo: install
	$(VENV)/bin/torchsmith tune --budget 3m --out plan.json --report report.html

# The checks first (seconds), then the suite: layers point one way, lint, types, tests.
check: install
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy

# One pytest-xdist worker per core (on 2 cores, one run each: 23m29s in one process; on two workers,
# with their processes on one thread each (tests/conftest.py), 10m43s on one VM, 13m19s and 11m33s in two
# clean-clone .ci/runs on a slower one, and 13m42s (cold Inductor cache), 12m01s and 14m26s on an AVX2-only
# EPYC whose test durations moved by 20% between the last two runs; on it again, 13m46s and 16m18s for the
# same code 30 minutes apart, then 14m29s and 18m32s two hours apart, every test slower in the second).
# On the AVX-512 (Zen 5) VM, four clean-clone .ci/runs of 896 tests: 7m17s to 9m15s, pytest 6m40s to 7m44s.
# It is bound by CPU (28 CPU-min in 14m26s), most of it child processes importing torch (2.2 s) and
# torch._dynamo (2.2 s more: any optimizer's constructor imports it). TEST_WORKERS=1 runs it on one.
# --dist loadgroup keeps a module's tests that share a module-scoped fixture on one worker (tests/conftest.py):
# with plain load scheduling each worker built it, and the slowest (a 45 s script tune) ran twice. On one VM,
# pytest of the same 901 tests took 10m30s and 10m21s before, 9m01s after (CPU 19.6 min, then 17.1); the
# clean-clone .ci/run after it, 11m38s in all (pytest 9m46s): still over 10 minutes on that VM.
test: check
	bash scripts/install_test_tools.sh
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# No test here starts a process or compiles (tests/spawn_guard.py fails one that does unmarked),
# so it needs neither chromium nor etcd; meant to take under 2 minutes on 2 quiet cores (--durations=25
# names what grew slow: mark it slow).
test-fast: check
	$(PY) -m pytest -q -m "not slow and not multiprocess"

clean:
	rm -rf $(VENV) plan.json report.html
