# Set-up and entry points. Each target creates .venv on first use and installs what it needs.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)

.PHONY: demo train test test-all bench fuzz opencl-runtime webgpu-runtime clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[opencl,webgpu,models,vision,autotune,train,test,reference]'
	rm -f $(VENV)/.installed-*
	touch $@

# An OpenCL CPU device for the fused backend: PoCL. The PyPI build (pocl-binary-distribution,
# LLVM 14) cannot compile for CPUs newer than its LLVM (it fails with "unknown target CPU
# 'generic'"), so where no device compiles a probe kernel, Debian's pocl-opencl-icd is installed.
opencl-runtime: $(STAMP)
	@$(PY) -m lazyburn.runtime.opencl_devices --probe >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing PoCL (Debian pocl-opencl-icd)"; \
	    (apt-get install -y -qq pocl-opencl-icd >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq pocl-opencl-icd >/dev/null)); \
	  else \
	    echo "no working OpenCL device; installing pocl-binary-distribution from PyPI"; \
	    $(PY) -m pip install -q pocl-binary-distribution; \
	  fi; }
	@$(PY) -m lazyburn.runtime.opencl_devices --probe

# A WebGPU adapter for CI: Mesa's lavapipe (Vulkan on the CPU) from Debian's
# mesa-vulkan-drivers, installed when no adapter is found and apt-get can run as root.
webgpu-runtime: $(STAMP)
	@$(PY) -m lazyburn.runtime.webgpu --probe >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Mesa's Vulkan drivers (lavapipe)"; \
	    (apt-get install -y -qq mesa-vulkan-drivers >/dev/null 2>&1 || \
	     (apt-get update -qq && apt-get install -y -qq mesa-vulkan-drivers >/dev/null)); \
	  else echo "no WebGPU adapter: the webgpu tests will be skipped"; fi; }
	@$(PY) -m lazyburn.runtime.webgpu --probe || true

demo: $(STAMP) opencl-runtime
	$(VENV)/bin/lazyburn demo

train: $(STAMP) opencl-runtime
	$(VENV)/bin/lazyburn train

# The quick tier (what CI runs); test-all adds the long tier (tests/conftest.py: SLOW)
test: $(STAMP) opencl-runtime webgpu-runtime
	$(PY) -m pytest -q -p no:cacheprovider -n auto --maxprocesses=4 -m "not slow" tests

test-all: $(STAMP) opencl-runtime webgpu-runtime
	$(PY) -m pytest -q -p no:cacheprovider -n auto --maxprocesses=4 tests

bench: $(STAMP) opencl-runtime
	$(PY) -m pytest -q benchmarks --benchmark-only --benchmark-columns=median,iqr,rounds

# The long random-graph campaign: N programs (seeds START...) on DEVICE against the NumPy
# reference; each failing program is shrunk and written as a standalone reproducer into
# fuzz-failures/ (run one with: $(PY) fuzz-failures/seed<S>_<device>.py).
N      ?= 1000
DEVICE ?= opencl:0
START  ?= 0
fuzz: $(STAMP) opencl-runtime webgpu-runtime
	LAZYBURN_AUTOTUNE=0 $(PY) tests/fuzz_graphs.py --n $(N) --device $(DEVICE) --start $(START) \
	  --out fuzz-failures

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .benchmarks
