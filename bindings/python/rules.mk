# SPDX-License-Identifier: BSD-3-Clause
# Python binding (included by the top-level Makefile).
#
#   make python-venv     a virtual environment in $(PY_VENV) with numpy, mpi4py, pytest and wheel (pip;
#                        needs the package index), which tests/script_python.sh (run by make check)
#                        then uses
#   make python-check    the Python tests alone (tests/script_python.sh)
#   make check           makes that venv first where it can (python-venv-auto): nothing to do when it
#                        is there or LM_PYTHON is set; when the package index is not reachable it says
#                        so in one line and the Python tests say SKIP (tools/python-venv.sh)
#
# PYTHON: the interpreter the venv is made from (default Debian's /usr/bin/python3; CI uses the
# same). PY_VENV: where (default $(BUILD)/python-venv; the test script also looks in
# build/python-venv, so one venv serves the sanitizer tree too).

PYTHON   ?= /usr/bin/python3
PY_VENV  ?= $(BUILD)/python-venv
PY_PIP_PACKAGES ?= numpy mpi4py pytest wheel

.PHONY: python-venv python-venv-auto python-check

python-venv: $(PY_VENV)/.stamp

$(PY_VENV)/.stamp:
	sh tools/python-venv.sh $(PYTHON) $(PY_VENV) $(PY_PIP_PACKAGES)

# After deps (order-only): under `make -j check` the venv must not be tried before ensure-deps.sh
# --check has installed python3-venv.
check: python-venv-auto
python-venv-auto: | deps
	@if [ ! -f build/python-venv/.stamp ]; then sh tools/python-venv.sh --auto $(PYTHON) $(PY_VENV) $(PY_PIP_PACKAGES); fi

python-check: lib $(BUILD)/examples/demo
	$(RUN_ENV) bash tests/script_python.sh
