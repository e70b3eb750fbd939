# wsgw — the two commands a new user needs: `make run` and `make test`.
# Both install what is missing (Debian packages, a venv with the package, the C shim).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PACKAGES := dpdk dpdk-dev libdpdk-dev pkg-config iproute2 ethtool iputils-ping procps kmod postgresql gcc chromium fonts-dejavu-core nats-server prometheus
STAMPS := .make
PYTEST_ARGS ?=

.PHONY: run test lint bench soak faultsoak deps venv shim clean lab-clean

run: deps venv shim
	$(VENV)/bin/wsgw demo

test: deps venv shim lint
	$(PY) -m pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

bench: deps venv shim
	$(VENV)/bin/wsgw bench all --out results/latest

# Resident memory over 10 minutes of stream through the whole gateway (not in `bench`).
soak: deps venv shim
	$(VENV)/bin/wsgw bench soak --out results/soak

# 30 minutes of upstream kills and link flaps against a dpdk and a kernel session (not in
# `bench`; its 30 s quick mode runs in `make test`).
faultsoak: deps venv shim
	$(VENV)/bin/wsgw bench faultsoak --out results/faultsoak

# Debian packages: installed only when one is missing (apt-get update first: a fresh
# machine has no package lists).
deps: $(STAMPS)/apt
$(STAMPS)/apt: Makefile
	@mkdir -p $(STAMPS)
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@touch $@

# The venv holds wsgw editable with its dev tools, and beside it wsgw_bench (the benchmarks
# and the servers tests start), which the wsgw wheel leaves out.
venv: $(STAMPS)/venv
$(STAMPS)/venv: pyproject.toml setup.py wsgw_bench/pyproject.toml | $(STAMPS)/apt
	@mkdir -p $(STAMPS)
	@if [ ! -x $(PY) ]; then \
	  $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	    rm -rf $(VENV); \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv && $(PYTHON) -m venv $(VENV); }; \
	fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]' -e ./wsgw_bench
	@touch $@

# Rebuild the shim whenever a C source or a ctypes mirror changed (the loader refuses a stale library).
shim: $(STAMPS)/venv dataplane/shim/libwsgw_shim.so
dataplane/shim/libwsgw_shim.so: $(wildcard dataplane/shim/*.c dataplane/shim/*.h dataplane/shim/_bind_*.py) setup.py
	WSGW_SHIM_BENCH=1 $(PY) setup.py -q build_ext --inplace

lab-clean:
	-@for n in $$($(VENV)/bin/wsgw lab status | $(PY) -c 'import json,sys;[print(l["name"]) for l in json.load(sys.stdin)]'); do \
	  $(VENV)/bin/wsgw lab down -n $$n; done

clean:
	rm -rf $(STAMPS) build *.egg-info dataplane/shim/libwsgw_shim.so
