# SPDX-License-Identifier: BSD-3-Clause
# cudasim: the simulated CUDA runtime and NCCL (tests/sim/README.md), its self-tests, and the
# prototype kernels.cu (tests/sim/proto). Included at the end of the top-level Makefile, whose
# variables it uses (BUILD, OPT, WARN, SAN, MPICC, MPICXX, RUN_ENV).
#
#   make sim-lib        $(BUILD)/sim/libcudasim.so
#   make sim-check      build and run the self-tests (tests/sim/run-sim-tests.sh)
#   make sim-gpu-check  prototype CUDA=sim build of the library, tests/gpu on it (see below)
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

# ---------------------------------------------------------------------------------------------
# Prototype of the CUDA=sim build mode (tests/sim/INTEGRATION.md describes the real one): the
# library compiled from src/ with -DLM_WITH_CUDA against tests/sim/include (kernels.cu: the
# prototype copy), linked with libcudasim; tests/gpu and bench_device linked against it.
#   make sim-gpu-check [SIM_NPS="1 2 4"] [SIM_TOPOLOGIES="per-rank shared shared:4"] [SIM_STAGING=512]
SIM_LM          := $(SIM_OUT)/lm
SIM_LM_CPPFLAGS := $(SIM_CPPFLAGS) -I$(SIM_DIR)/proto \
                   $(filter-out -I$(CUDA_HOME)/include -DLM_WITH_CUDA,$(LIB_CPPFLAGS)) -DLM_WITH_CUDA
SIM_LM_OBJS     := $(patsubst src/%.cpp,$(SIM_LM)/obj/%.o,$(LIB_SRCS)) $(SIM_LM)/obj/device/kernels.cu.o
SIM_LM_SO       := $(SIM_LM)/lib/$(SONAME)
SIM_GPU_BINS    := $(patsubst tests/gpu/%.c,$(SIM_LM)/tests/gpu/%,$(GPU_TEST_C)) $(SIM_LM)/bench/bench_device
SIM_NPS         ?= 1 2 4
SIM_TOPOLOGIES  ?= per-rank shared shared:4
SIM_STAGING     ?= 512

$(SIM_LM)/obj/%.o: src/%.cpp $(SIM_HDRS)
	@mkdir -p $(@D)
	$(MPICXX) $(SIM_LM_CPPFLAGS) $(LIB_CXXFLAGS) -MMD -MP -MF $@.d -c -o $@ $<

$(SIM_LM)/obj/device/kernels.cu.o: $(SIM_DIR)/proto/device/kernels.cu $(SIM_DIR)/proto/device/launch.hpp $(SIM_HDRS)
	@mkdir -p $(@D)
	$(MPICXX) $(SIM_LM_CPPFLAGS) $(LIB_CXXFLAGS) -MMD -MP -MF $@.d -x c++ -c -o $@ $<

$(SIM_LM_SO): $(SIM_LM_OBJS) $(SIM_LIB) src/localmap.map
	@mkdir -p $(@D)
	$(MPICXX) -shared $(SAN) -Wl,-soname,$(SONAME) -Wl,--version-script=src/localmap.map \
	  -Wl,--no-undefined -o $@ $(SIM_LM_OBJS) $(SIM_LINK)
	ln -sf $(SONAME) $(SIM_LM)/lib/$(LIBNAME).so

SIM_PROG_LINK = -L$(SIM_LM)/lib -llocalmap -Wl,-rpath,$(abspath $(SIM_LM)/lib) $(SIM_LINK) $(SAN)

$(SIM_LM)/tests/gpu/%: tests/gpu/%.c tests/gpu/gpu_test.h $(SIM_LM_SO)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Itests -Itests/gpu $(SIM_CPPFLAGS) $(TEST_CFLAGS) -o $@ $< \
	  $(SIM_PROG_LINK) -lcmocka -lm

$(SIM_LM)/bench/bench_device: bench/bench_device.c $(SIM_LM_SO)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Ibench $(SIM_CPPFLAGS) $(TEST_CFLAGS) -o $@ $< $(SIM_PROG_LINK) -lm

.PHONY: sim-gpu sim-gpu-check
sim-gpu: $(SIM_GPU_BINS)

# Each SIM_TOPOLOGIES entry is TOPOLOGY[:DEVICES]: per-rank (each process its own GPU, as with
# CUDA_VISIBLE_DEVICES per rank), shared (one GPU for all: host-staged), shared:4 (a node of 4
# GPUs, ranks pick local rank % 4: NCCL up to np 4).
sim-gpu-check: sim-gpu
	@rc=0; for cfg in $(SIM_TOPOLOGIES); do t=$${cfg%%:*}; d=$${cfg#*:}; [ "$$d" = "$$cfg" ] && d=1; \
	  echo "== tests/gpu on cudasim: CUDASIM_TOPOLOGY=$$t CUDASIM_DEVICES=$$d"; \
	  $(RUN_ENV) BUILD=$(SIM_LM) NPS="$(SIM_NPS)" LM_TEST_GPU_ONLY=1 CUDASIM_TOPOLOGY=$$t \
	    CUDASIM_DEVICES=$$d bash tests/run-tests.sh $(or $(TESTS),'test_gpu_*') || rc=1; done; \
	if [ -n "$(SIM_STAGING)" ]; then \
	  echo "== tests/gpu on cudasim: per-rank, LM_STAGING_BYTES=$(SIM_STAGING) (steps that would pipeline)"; \
	  $(RUN_ENV) BUILD=$(SIM_LM) NPS="$(SIM_NPS)" LM_TEST_GPU_ONLY=1 LM_STAGING_BYTES=$(SIM_STAGING) \
	    bash tests/run-tests.sh $(or $(TESTS),'test_gpu_*') || rc=1; fi; exit $$rc

-include $(SIM_LM_OBJS:=.d)
