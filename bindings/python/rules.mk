# SPDX-License-Identifier: BSD-3-Clause
# Python binding (included by the top-level Makefile).
#
#   make python-venv     a virtual environment in $(PY_VENV) with numpy, mpi4py, pytest and wheel (pip;
#                        needs PyPI), which tests/script_python.sh (run by make check) then uses
#   make python-check    the Python tests alone (tests/script_python.sh)
#
# PYTHON: the interpreter the venv is made from (default Debian's /usr/bin/python3; CI uses the
# same). PY_VENV: where (default $(BUILD)/python-venv; the test script also looks in
# build/python-venv, so one venv serves the sanitizer tree too).

PYTHON   ?= /usr/bin/python3
PY_VENV  ?= $(BUILD)/python-venv
PY_PIP_PACKAGES ?= numpy mpi4py pytest wheel

.PHONY: python-venv python-check

python-venv: $(PY_VENV)/.stamp

$(PY_VENV)/.stamp:
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || { echo "python-venv: $(PYTHON) cannot make a venv (Debian: apt-get install python3-venv)"; exit 1; }
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q $(PY_PIP_PACKAGES)
	@$(PY_VENV)/bin/python -c 'import numpy, mpi4py, pytest; print("python-venv:", "numpy", numpy.__version__, "mpi4py", mpi4py.__version__, "pytest", pytest.__version__)'
	@touch $@

python-check: lib $(BUILD)/examples/demo
	$(RUN_ENV) bash tests/script_python.sh
