# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Checks PYTHON (3.11+), rebuilds a venv made by another Python, installs edgeagent with the given extras at
# the versions of constraints.txt (once per content of pyproject.toml + constraints.txt). See tools/venv.sh.
SETUP := PYTHON='$(PYTHON)' VENV='$(VENV)' bash tools/venv.sh

.PHONY: demo test lint bench bench-quick clean clean-cache test-system system-deps venv-demo venv-test constraints screenshot soak

# The demo needs the simulator (the sim extra), not the test toolchain.
venv-demo:
	@$(SETUP) sim

venv-test:
	@$(SETUP) sim,exec,test,dev

demo: venv-demo
	$(BIN)/edgeagent demo

lint: venv-test
	$(BIN)/ruff check edgeagent tests bench
	$(BIN)/mypy --strict edgeagent tests bench
	$(BIN)/lint-imports

# Debian's chromium, chromium-driver and prometheus (promtool) for the browser and alert-rule tests.
system-deps:
	@bash tests/system-deps.sh

# The suite waits far more than it computes (sims, agents, subprocesses, timers), so it runs in TEST_WORKERS
# pytest-xdist processes; tests marked `slow` are handed out first, and tests that must not overlap share an
# xdist_group (loadgroup keeps a group on one worker). See docs/development.md. `make test TEST_WORKERS=0`: serial.
TEST_WORKERS ?= 3
test: lint system-deps
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# Not part of `make test`: boots Debian 12 with systemd (nspawn) and builds/runs the image with podman.
# Needs root; installs missing Debian packages; caches the rootfs and images under .cache/ (about 1.4 GB;
# `make clean-cache` removes it). See docs/development.md.
test-system: venv-demo
	bash tests/system/run.sh

bench: venv-demo
	$(BIN)/python bench/run_all.py

# Not part of `make test` (a one-minute soak is): a seeded fault campaign against 200 simulated nodes, 30 real
# agents and two controllers, judged by tests/soak/checker.py. `make soak SECONDS=1800 SEED=7`;
# SOAK_ARGS passes more options (`SOAK_ARGS="--workdir /tmp/soak-7"` keeps everything there).
# It first runs the rollout state machine's model-based test deeper than `make test` does (MODEL_EXAMPLES).
SECONDS ?= 600
SEED ?= 1
SOAK_ARGS ?=
MODEL_EXAMPLES ?= 2000
soak: venv-test
	EDGEAGENT_MODEL_EXAMPLES=$(MODEL_EXAMPLES) $(BIN)/pytest -q -n 0 -p no:randomly --timeout 0 tests/unit/test_rollout_model.py
	$(BIN)/python bench/soak.py --seconds $(SECONDS) --seed $(SEED) $(SOAK_ARGS)

bench-quick: venv-demo
	$(BIN)/python bench/run_all.py --quick

# The README's picture of the dashboard (docs/img/dashboard.png), taken by its browser test in headless Chromium.
screenshot: venv-test system-deps
	EDGEAGENT_SCREENSHOT=docs/img/dashboard.png $(BIN)/pytest -q -p no:randomly \
		tests/e2e/test_dashboard_browser.py -k shows_the_fleet_and_follows_it_live
	@test -s docs/img/dashboard.png && echo "== docs/img/dashboard.png written"
	EDGEAGENT_ACTIONS_SCREENSHOT=docs/img/dashboard-actions.png $(BIN)/pytest -q -p no:randomly \
		tests/e2e/test_dashboard_actions_browser.py -k promote_button
	@test -s docs/img/dashboard-actions.png && echo "== docs/img/dashboard-actions.png written"

# constraints.txt: every package make and CI install, at one version each. Run after changing a dependency
# in pyproject.toml, and commit the result.
constraints: venv-test
	$(BIN)/pip-compile --quiet --all-extras --strip-extras --no-emit-index-url --no-emit-find-links \
	    --output-file constraints.txt pyproject.toml

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
	@if [ -d .cache ]; then echo "make: kept .cache/ ($$(du -sh .cache | cut -f1); the system test's Debian rootfs and images): make clean-cache removes it"; fi

clean-cache:
	rm -rf .cache
