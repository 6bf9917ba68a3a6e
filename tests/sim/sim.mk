# SPDX-License-Identifier: BSD-3-Clause
# cudasim: the simulated CUDA runtime and NCCL (tests/sim/README.md), its self-tests, and the
# prototype kernels.cu (tests/sim/proto). Included at the end of the top-level Makefile, whose
# variables it uses (BUILD, OPT, WARN, SAN, MPICC, MPICXX, RUN_ENV).
#
#   make sim-lib     $(BUILD)/sim/libcudasim.so
#   make sim-check   build and run the self-tests (tests/sim/run-sim-tests.sh)
#
# Never installed: libcudasim.so is a test fixture, not part of the release library.

SIM_DIR      := tests/sim
SIM_OUT      := $(BUILD)/sim
SIM_LIB      := $(SIM_OUT)/libcudasim.so
SIM_SRCS     := $(wildcard $(SIM_DIR)/lib/*.cpp)
SIM_OBJS     := $(patsubst $(SIM_DIR)/lib/%.cpp,$(SIM_OUT)/obj/%.o,$(SIM_SRCS))
SIM_HDRS     := $(wildcard $(SIM_DIR)/include/*.h $(SIM_DIR)/lib/*.hpp)
SIM_CXX      ?= g++
# Our headers first, so they win over any CUDA installation on the include path.
SIM_CPPFLAGS := -I$(SIM_DIR)/include
SIM_CXXFLAGS := -std=c++17 -fPIC -pthread $(OPT) -g $(WARN) $(SAN)
SIM_LINK     := -L$(SIM_OUT) -Wl,-rpath,$(abspath $(SIM_OUT)) -lcudasim

.PHONY: sim-lib sim-tests sim-check

sim-lib: $(SIM_LIB)

$(SIM_OUT)/obj/%.o: $(SIM_DIR)/lib/%.cpp $(SIM_HDRS)
	@mkdir -p $(@D)
	$(SIM_CXX) $(SIM_CPPFLAGS) $(SIM_CXXFLAGS) -c -o $@ $<

$(SIM_LIB): $(SIM_OBJS)
	$(SIM_CXX) -shared -pthread $(SAN) -Wl,-soname,libcudasim.so -Wl,--no-undefined -o $@ $^ -lrt
