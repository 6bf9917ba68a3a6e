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

# Self-tests: single-process ones with g++, the NCCL ones with the MPI wrappers (ranks under
# tools/lm-mpirun share unique ids with MPI_Bcast).
SIM_TEST_CXXFLAGS := -std=c++17 -pthread $(OPT) -g $(WARN) $(SAN)
SIM_TESTS := $(SIM_OUT)/test_cuda

$(SIM_OUT)/test_cuda: $(SIM_DIR)/selftest/test_cuda.cpp $(SIM_DIR)/selftest/sim_test.h $(SIM_LIB)
	$(SIM_CXX) $(SIM_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(SIM_LINK) $(SAN)


# The prototype kernels.cu (tests/sim/proto: src/device/kernels.cu with the launch macros of
# INTEGRATION.md) compiled as C++ the way a CUDA=sim build compiles src/**/*.cu: our headers
# first, then the prototype folder (device/launch.hpp), then the library's own headers.
SIM_PROTO_CPPFLAGS := $(SIM_CPPFLAGS) -I$(SIM_DIR)/proto $(LIB_CPPFLAGS) -DLM_WITH_CUDA
SIM_PROTO_OBJS := $(SIM_OUT)/proto/kernels.o $(SIM_OUT)/proto/error.o $(SIM_OUT)/proto/dtype.o

$(SIM_OUT)/proto/kernels.o: $(SIM_DIR)/proto/device/kernels.cu $(SIM_DIR)/proto/device/launch.hpp $(SIM_HDRS)
	@mkdir -p $(@D)
	$(MPICXX) $(SIM_PROTO_CPPFLAGS) $(LIB_CXXFLAGS) -x c++ -c -o $@ $<

$(SIM_OUT)/proto/%.o: src/core/%.cpp
	@mkdir -p $(@D)
	$(MPICXX) $(SIM_PROTO_CPPFLAGS) $(LIB_CXXFLAGS) -c -o $@ $<

$(SIM_OUT)/test_kernels: $(SIM_DIR)/selftest/test_kernels.cpp $(SIM_PROTO_OBJS) $(SIM_DIR)/selftest/sim_test.h $(SIM_LIB)
	$(MPICXX) $(SIM_PROTO_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(SIM_PROTO_OBJS) $(SIM_LINK) $(SAN)

SIM_TESTS += $(SIM_OUT)/test_kernels

$(SIM_OUT)/test_nccl: $(SIM_DIR)/selftest/test_nccl.cpp $(SIM_LIB)
	$(MPICXX) $(SIM_CPPFLAGS) $(MPI_CPPFLAGS) $(SIM_TEST_CXXFLAGS) -o $@ $< $(SIM_LINK) $(SAN)

SIM_TESTS += $(SIM_OUT)/test_nccl

sim-tests: $(SIM_TESTS)

sim-check: sim-tests
	$(RUN_ENV) bash $(SIM_DIR)/run-sim-tests.sh
