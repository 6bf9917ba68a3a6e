# SPDX-License-Identifier: BSD-3-Clause
# cudasim: the simulated CUDA runtime and NCCL (tests/sim/README.md) and its self-tests. Included
# at the end of the top-level Makefile, whose variables it uses (BUILD, OPT, WARN, SAN, MPICXX,
# SIM_CPPFLAGS, CUDA_SIM, LIB_CPPFLAGS, STATICLIB, DEVLIB, RPATH_LIB, RUN_ENV). The top-level
# CUDA=sim mode links the device component, tests/gpu and bench_device against $(SIM_LIB)
# (tests/sim/INTEGRATION.md).
#
#   make sim-lib CUDA=sim     $(BUILD)/sim/libcudasim.so
#   make sim-check            the self-tests (tests/sim/run-sim-tests.sh); in a CUDA=sim build,
#                             as any other make runs it with CUDA=sim (build-sim/)
#
# Never installed: libcudasim.so is a test fixture, not part of the release library.

SIM_DIR      := tests/sim
SIM_OUT      := $(BUILD)/sim
SIM_LIB      := $(SIM_OUT)/libcudasim.so  # also in the Makefile (the device component's prerequisite)
SIM_SRCS     := $(wildcard $(SIM_DIR)/lib/*.cpp)
SIM_OBJS     := $(patsubst $(SIM_DIR)/lib/%.cpp,$(SIM_OUT)/obj/%.o,$(SIM_SRCS))
SIM_HDRS     := $(wildcard $(SIM_DIR)/include/*.h $(SIM_DIR)/lib/*.hpp)
SIM_CXX      ?= g++
SIM_CXXFLAGS := -std=c++17 -fPIC -pthread $(OPT) -g $(WARN) $(SAN)
SIM_LINK     := -L$(SIM_OUT) -Wl,-rpath,$(abspath $(SIM_OUT)) -lcudasim

.PHONY: sim-lib sim-tests sim-check

ifeq ($(CUDA_SIM),1)
sim-lib: $(SIM_LIB)

$(SIM_OUT)/obj/%.o: $(SIM_DIR)/lib/%.cpp $(SIM_HDRS)
	@mkdir -p $(@D)
	$(SIM_CXX) $(SIM_CPPFLAGS) $(SIM_CXXFLAGS) -c -o $@ $<

$(SIM_LIB): $(SIM_OBJS)
	$(SIM_CXX) -shared -pthread $(SAN) -Wl,-soname,libcudasim.so -Wl,--no-undefined -o $@ $^ -lrt

# Self-tests: test_cuda with g++; test_kernels runs the library's own device/kernels.cu through
# the static library's device MemOps, which load this build's device component (lib/, found by
# test_kernels' RUNPATH): the component's real dlopen path; test_nccl with the MPI wrappers
# (ranks under tools/lm-mpirun share unique ids with MPI_Bcast).
SIM_TEST_CXXFLAGS := -std=c++17 -pthread $(OPT) -g $(WARN) $(SAN)
SIM_TESTS := $(SIM_OUT)/test_cuda $(SIM_OUT)/test_kernels $(SIM_OUT)/test_nccl

$(SIM_OUT)/test_cuda: $(SIM_DIR)/selftest/test_cuda.cpp $(SIM_DIR)/selftest/sim_test.h $(SIM_LIB)
	$(SIM_CXX) $(SIM_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(SIM_LINK) $(SAN)

$(SIM_OUT)/test_kernels: $(SIM_DIR)/selftest/test_kernels.cpp $(SIM_DIR)/selftest/sim_test.h $(STATICLIB) $(SIM_LIB) $(DEVLIB)
	$(MPICXX) $(SIM_CPPFLAGS) $(LIB_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(STATICLIB) $(SIM_LINK) \
	  $(RPATH_LIB) $(LIB_LDLIBS) $(SAN)

$(SIM_OUT)/test_nccl: $(SIM_DIR)/selftest/test_nccl.cpp $(SIM_LIB)
	$(MPICXX) $(SIM_CPPFLAGS) $(MPI_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(SIM_LINK) $(SAN)

sim-tests: $(SIM_TESTS)

sim-check: sim-tests
	$(RUN_ENV) bash $(SIM_DIR)/run-sim-tests.sh
else
# Outside CUDA=sim these are the CUDA=sim build's (its own tree, build-sim/).
sim-lib sim-tests sim-check:
	$(MAKE) CUDA=sim $@
endif
