# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-quick clean test-system system-deps screenshot

# The first run downloads the dependencies from PyPI (up to a minute): pip lists each package as it comes.
$(STAMP): pyproject.toml
	@echo "== creating $(VENV) with $(PYTHON) (once)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "== installing edgeagent and its test tools from PyPI into $(VENV) (once; up to a minute)"
	$(BIN)/python -m pip install --progress-bar off -e '.[test]' | grep --line-buffered -E '^(Collecting|Successfully)' || true
	$(BIN)/python -c 'import edgeagent, pytest, mypy, ruff' || { echo "make: the install into $(VENV) failed; see pip's messages above"; exit 1; }
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/edgeagent demo

lint: $(STAMP)
	$(BIN)/ruff check edgeagent tests bench
	$(BIN)/mypy --strict edgeagent tests bench
	$(BIN)/lint-imports

# Debian's chromium, chromium-driver and prometheus (promtool) for the browser and alert-rule tests.
system-deps:
	@bash tests/system-deps.sh

test: lint system-deps
	$(BIN)/pytest -q

# Not part of `make test`: boots Debian 12 with systemd (nspawn) and builds/runs the image with podman.
# Needs root; installs missing Debian packages; caches the rootfs and images under .cache/ (see README).
test-system: $(STAMP)
	bash tests/system/run.sh

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

bench-quick: $(STAMP)
	$(BIN)/python bench/run_all.py --quick

# The README's picture of the dashboard (docs/img/dashboard.png), taken by its browser test in headless Chromium.
screenshot: $(STAMP) system-deps
	EDGEAGENT_SCREENSHOT=docs/img/dashboard.png $(BIN)/pytest -q -p no:randomly \
		tests/e2e/test_dashboard_browser.py -k shows_the_fleet_and_follows_it_live
	@test -s docs/img/dashboard.png && echo "== docs/img/dashboard.png written"

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
