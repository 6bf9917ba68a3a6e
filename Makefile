# SPDX-License-Identifier: BSD-3-Clause
# localmap: top-level GNU Makefile.
#
#   make [all]              library, tests, examples (checks deps first)
#   make lib                build/lib/liblocalmap.so.X.Y.Z (+ symlinks), liblocalmap.a, localmap.pc,
#                           and where CUDA is on, the device component build/lib/liblocalmap-cuda.so.X
#   make check              build everything, run tests/run-tests.sh (NPS="1 2" to pick sizes)
#   make check ASAN=1 UBSAN=1   same with sanitizers, in build-asan/ by default
#   make check MPI=mpich    same against MPICH (mpicc.mpich, mpiexec.mpich), in build-mpich/
#   make check-gpu [NPS="1 2 4"] [NCCL_SPLIT_HOSTS=1]   device tests (tests/gpu/) only
#   make device-component   the device component alone (CUDA=1)
#   make check-gpu-sim      the device path on the simulated CUDA runtime and NCCL (tests/sim):
#                           its self-tests, tests/gpu at np 1, 2, 4 in every topology, bench_device
#   make check CUDA=sim     the whole suite against the simulator (build-sim/), then the same
#   make demo | bench | examples | tests
#   make install [PREFIX=/usr/local] [DESTDIR=...] [LIBDIR=...] [INCLUDEDIR=...] | uninstall
#   make docs               every API reference: in $(BUILD)/docs the C and C++ HTML (doxygen; a
#                           warning fails), the man pages (localmap(3), one per function), the
#                           Fortran module's HTML and the Rust crates' (cargo doc, when cargo is
#                           there); docs/fortran-reference.md (rewritten when stale). Python's: the
#                           docstrings (python3 -m pydoc localmap)
#   make man | fortran-ref | rust-doc   one of them (fortran-ref: docs/fortran-reference.md from
#                           bindings/fortran/, also run by make api-generate; commit it)
#   make abi-dump           abidw of the shared library into $(BUILD)/localmap.abi
#   make abi-check          abidiff against abi/localmap.abi (the committed baseline)
#   make abi-baseline       regenerate abi/localmap.abi from this build (at a release)
#   make fuzz [FUZZ_SECONDS=60]  libFuzzer targets (clang 14) in build-fuzz/; see fuzz/fuzz.mk
#   make check-tcp          make check with LM_MPIRUN_FLAGS="--mca btl tcp,self" (no shared memory)
#   make check-multinode [NODES=2]   the MPI tests on simulated nodes over TCP (tests/README.md)
#   make clean | deps
#
# Variables: OPT (-O2), WERROR (1), ASAN, UBSAN, CUDA (auto|0|1|sim), CUDA_HOME, NCCL_HOME,
# NCCL_LIB, BUILD (build), MPI (openmpi|mpich), MPICC, MPICXX, DLPACK_INCLUDE_DIR, and the usual
# CPPFLAGS CFLAGS CXXFLAGS LDFLAGS LDLIBS, appended to ours.

PREFIX     ?= /usr/local
DESTDIR    ?=
LIBDIR     ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
BINDIR     ?= $(PREFIX)/bin
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR   ?= $(LIBDIR)/cmake/localmap
DATAROOTDIR ?= $(PREFIX)/share
DOCDIR     ?= $(DATAROOTDIR)/doc/localmap
MANDIR     ?= $(DATAROOTDIR)/man

# The device component (docs/DESIGN.md, "The component"). liblocalmap.so never links
# CUDA or NCCL, in any build: device support is liblocalmap-cuda.so.<major>, built from src/device/
# beside it, which the library loads with dlopen at the first use of a device. CUDA=auto
# (default): the component is built when $(CUDA_HOME)/bin/nvcc (or nvcc on PATH) and nccl.h are
# found, and make says what it chose; CUDA=0: none; CUDA=1: required (the build stops when they
# are missing). The component compiles src/device/*.cu with nvcc and links the CUDA runtime and
# NCCL; the whole CPU suite runs on machines without a GPU (device tests skip). CUDA=sim: the same
# component against tests/sim's simulated CUDA runtime and NCCL (libcudasim.so,
# tests/sim/README.md): kernels compiled as host C++, its own build trees (build-sim/,
# build-sim-asan/), a test build that is never installed.
# NCCL_HOME: where include/nccl.h is (default CUDA_HOME); NCCL_LIB: the folder of libnccl.so or,
# as in the nvidia-nccl-cu13 wheel, of libnccl.so.2 alone.
CUDA       ?= auto
ifeq ($(CUDA),sim)
override CUDA     := 1
override CUDA_SIM := 1
else
override CUDA_SIM := 0
endif
CUDA_HOME  ?= $(or $(patsubst %/bin/nvcc,%,$(realpath $(shell command -v nvcc 2>/dev/null))),/usr/local/cuda)
NVCC       ?= $(CUDA_HOME)/bin/nvcc
# Compute capabilities compiled (SASS) plus PTX of the newest for JIT on later GPUs.
CUDA_ARCHS ?= 80 90
CUDA_LIBDIR ?= $(firstword $(wildcard $(CUDA_HOME)/lib64/libcudart.so $(CUDA_HOME)/lib/libcudart.so))
NCCL_HOME  ?= $(CUDA_HOME)
NCCL_LIB   ?= $(patsubst %/,%,$(dir $(firstword $(wildcard $(foreach d,lib64 lib,$(NCCL_HOME)/$(d)/libnccl.so \
                $(NCCL_HOME)/$(d)/libnccl.so.2)))))
NCCL_LINK  := $(if $(or $(wildcard $(NCCL_LIB)/libnccl.so),$(if $(wildcard $(NCCL_LIB)/libnccl.so.2),,1)),-lnccl,-l:libnccl.so.2)
override CUDA_FOUND := $(if $(and $(wildcard $(NVCC)),$(wildcard $(NCCL_HOME)/include/nccl.h),$(CUDA_LIBDIR)),1,0)
ifeq ($(CUDA),auto)
override CUDA := $(CUDA_FOUND)
override CUDA_AUTO := 1
else ifeq ($(CUDA_SIM),1)
else ifeq ($(CUDA),1)
ifneq ($(CUDA_FOUND),1)
$(error CUDA=1 but nvcc, nccl.h or libcudart.so is missing under CUDA_HOME=$(CUDA_HOME) / NCCL_HOME=$(NCCL_HOME) (give CUDA_HOME=..., NCCL_HOME=..., or CUDA=0))
endif
else ifneq ($(CUDA),0)
$(error CUDA must be auto, 0, 1 or sim (got "$(CUDA)"))
endif
CUDA_LIBDIR := $(patsubst %/,%,$(dir $(CUDA_LIBDIR)))
# CUDA=sim links libcudasim (Libs.private, rpaths into the build tree): never installed.
ifeq ($(CUDA_SIM),1)
ifneq ($(filter install abi-dump abi-check abi-baseline,$(MAKECMDGOALS)),)
$(error CUDA=sim is a test build (the simulated CUDA runtime of tests/sim): not installable)
endif
endif
# Whether this machine shows a GPU (a device node of the NVIDIA driver): for messages and
# LM_EXPECT_GPU, never for what is built.
GPU_SEEN   := $(if $(wildcard /dev/nvidia[0-9]*),1,0)
# CUDA=auto says what it chose (on stderr, once per top-level make; not for print-cuda).
ifeq ($(CUDA_AUTO)$(MAKELEVEL),10)
ifeq ($(filter print-cuda help clean,$(MAKECMDGOALS)),)
ifeq ($(CUDA),1)
$(shell echo 'CUDA=auto: a CUDA build (nvcc and nccl.h under $(NCCL_HOME)): the device component liblocalmap-cuda links libcudart and libnccl, liblocalmap none; $(if $(filter 1,$(GPU_SEEN)),a GPU is visible: tests/gpu run,no GPU on this machine: tests/gpu skip) (CUDA=0: CPU only; CUDA=sim: the device path on the simulator)' >&2)
else
$(shell echo 'CUDA=auto: a CPU-only build (no nvcc with nccl.h under CUDA_HOME=$(CUDA_HOME); CUDA=1 requires them; CUDA=sim: the device path on the simulator)' >&2)
endif
endif
endif

OPT        ?= -O2
WERROR     ?= 1
ASAN       ?= 0
UBSAN      ?= 0

# MPI flavour. Empty: the system default (Debian's mpicc/mpicxx/mpirun alternatives). openmpi or
# mpich: that one explicitly (Debian installs both side by side as mpicc.openmpi, mpicc.mpich, ...),
# built into its own tree (build-mpich/) unless BUILD is given, run with its own launcher.
MPI        ?=
ifeq ($(MPI),)
MPI_SUFFIX :=
else ifneq ($(filter openmpi mpich,$(MPI)),)
MPI_SUFFIX := .$(MPI)
else
$(error MPI=$(MPI): use MPI=openmpi or MPI=mpich, or leave it empty for the default mpicc)
endif

# Sanitizer builds get their own tree unless BUILD is given, so objects never mix; CUDA=sim too.
ifeq ($(CUDA_SIM),1)
BUILD      ?= build-sim$(if $(filter 1,$(ASAN) $(UBSAN)),-asan)$(if $(filter mpich,$(MPI)),-mpich)
endif
ifneq ($(filter 1,$(ASAN) $(UBSAN)),)
BUILD      ?= build-asan$(if $(filter mpich,$(MPI)),-mpich)
else
BUILD      ?= build$(if $(filter mpich,$(MPI)),-mpich)
endif

MPICC      ?= mpicc$(MPI_SUFFIX)
MPICXX     ?= mpicxx$(MPI_SUFFIX)
# The Fortran wrapper of the same MPI (bindings/fortran): mixing MPIs in one process crashes.
MPIFC      ?= mpif90$(MPI_SUFFIX)
# The launcher tools/lm-mpirun uses (it adapts its flags to OpenMPI or MPICH/Hydra).
MPIRUN     ?= $(if $(filter mpich,$(MPI)),mpiexec.mpich,mpirun$(MPI_SUFFIX))
# The MPI C wrapper the CMake package hands to FindMPI, so that a consumer finds the MPI
# liblocalmap was built with (mpicc.mpich for MPI=mpich) rather than the system default.
ifndef MPI_C_COMPILER
MPI_C_COMPILER := $(or $(shell command -v $(MPICC) 2>/dev/null),$(MPICC))
endif
# Likewise for C++-only and Fortran consumers (the package finds MPI for the languages enabled).
ifndef MPI_CXX_COMPILER
MPI_CXX_COMPILER := $(or $(shell command -v $(MPICXX) 2>/dev/null),$(MPICXX))
endif
ifndef MPI_Fortran_COMPILER
MPI_Fortran_COMPILER := $(or $(shell command -v $(MPIFC) 2>/dev/null),$(MPIFC))
endif
AR         ?= ar
INSTALL    ?= install
PKG_CONFIG ?= pkg-config
ABIDW      ?= abidw
ABIDIFF    ?= abidiff
DOXYGEN    ?= doxygen
HASH := \#

# DLPack: the directory holding dlpack/dlpack.h, as the compiler finds it (override with
# DLPACK_INCLUDE_DIR=/path/include). localmap.h includes it, so the .pc file and the CMake package
# carry it to users. Supported DLPack versions: 0.6 (Debian 12) to 1.x.
ifndef DLPACK_INCLUDE_DIR
DLPACK_INCLUDE_DIR := $(patsubst %/dlpack/dlpack.h,%,$(firstword $(filter %/dlpack/dlpack.h, \
  $(shell printf '$(HASH)include <dlpack/dlpack.h>\n' | $(MPICC) $(CPPFLAGS) -M -x c - 2>/dev/null))))
endif
DLPACK_CPPFLAGS := $(if $(filter-out /usr/include,$(DLPACK_INCLUDE_DIR)),-I$(DLPACK_INCLUDE_DIR))

# ---------------------------------------------------------------------------------------------
# Version (from include/localmap.h), names
# ---------------------------------------------------------------------------------------------
lm_version_part = $(or $(shell sed -n 's/^$(HASH)define LM_VERSION_$(1) \([0-9][0-9]*\).*/\1/p' include/localmap.h 2>/dev/null),0)
VERSION_MAJOR := $(call lm_version_part,MAJOR)
VERSION_MINOR := $(call lm_version_part,MINOR)
VERSION_PATCH := $(call lm_version_part,PATCH)
VERSION       := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)

LIBNAME    := liblocalmap
SONAME     := $(LIBNAME).so.$(VERSION_MAJOR)
SHLIB_REAL := $(BUILD)/lib/$(LIBNAME).so.$(VERSION)
SHLIB_SO   := $(BUILD)/lib/$(SONAME)
SHLIB_DEV  := $(BUILD)/lib/$(LIBNAME).so
STATICLIB  := $(BUILD)/lib/$(LIBNAME).a
PCFILE     := $(BUILD)/localmap.pc
MANPAGE    := $(BUILD)/docs/localmap.3
MAN3DIR    := $(BUILD)/docs/man3
DOCS_HTML  := $(BUILD)/docs/html/index.html
DOCS_FORTRAN := $(BUILD)/docs/fortran/html/index.html
CMAKE_CONFIG  := $(BUILD)/cmake/localmapConfig.cmake
CMAKE_VERSION_FILE := $(BUILD)/cmake/localmapConfigVersion.cmake
ABIFILE    := $(BUILD)/localmap.abi
ABI_BASELINE ?= abi/localmap.abi

# The MPI pkg-config module the .pc file requires: the one of the MPI we build with (Debian's
# OpenMPI ships ompi.pc, MPICH mpich.pc). For the default mpicc, ask it which MPI it is (OpenMPI's
# wrapper knows --showme, MPICH's -show).
ifndef MPI_PC
ifeq ($(MPI),mpich)
MPI_PC     := mpich
else ifeq ($(MPI),openmpi)
MPI_PC     := ompi
else
MPI_PC     := $(shell $(MPICC) --showme:version >/dev/null 2>&1 && echo ompi || \
                ($(MPICC) -show >/dev/null 2>&1 && echo mpich) || echo mpi)
endif
endif

# ---------------------------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------------------------
WARN     := -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror)
SAN      :=
ifeq ($(ASAN),1)
SAN      += -fsanitize=address -fno-omit-frame-pointer
endif
ifeq ($(UBSAN),1)
SAN      += -fsanitize=undefined -fno-sanitize-recover=undefined
endif

comma := ,
ABS_BUILD  := $(abspath $(BUILD))
# The simulator's drop-in CUDA/NCCL headers and its library (rules: tests/sim/sim.mk).
SIM_CPPFLAGS := -Itests/sim/include
SIM_LIB      := $(BUILD)/sim/libcudasim.so

# Skip OpenMPI's deprecated C++ bindings (mpi.h from C++): they fail -Wextra -Werror.
MPI_CPPFLAGS := -DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1
PUB_CPPFLAGS := -Iinclude $(DLPACK_CPPFLAGS)
LIB_CPPFLAGS := $(PUB_CPPFLAGS) -Isrc $(MPI_CPPFLAGS)
# dlopen of the device component (in libc since glibc 2.34; -ldl for older ones).
LIB_LDLIBS   := -ldl
# The CUDA runtime and NCCL headers, and the libraries: CUDA's, or in CUDA=sim the simulator's
# (tests/sim/sim.mk: SIM_CPPFLAGS, $(BUILD)/sim/libcudasim.so stands for libcudart AND libnccl).
ifeq ($(CUDA_SIM),1)
CUDA_INC      = $(SIM_CPPFLAGS)
CUDA_RT_LIBS  = -L$(ABS_BUILD)/sim -Wl,-rpath,$(ABS_BUILD)/sim -lcudasim
CUDA_NCCL_LIBS = $(CUDA_RT_LIBS)
else
CUDA_INC      = -I$(CUDA_HOME)/include $(if $(filter-out $(CUDA_HOME),$(NCCL_HOME)),-I$(NCCL_HOME)/include)
CUDA_RT_LIBS  = -L$(CUDA_LIBDIR) -Wl,-rpath,$(CUDA_LIBDIR) -lcudart
CUDA_NCCL_LIBS = $(if $(NCCL_LIB),-L$(NCCL_LIB) -Wl$(comma)-rpath$(comma)$(NCCL_LIB)) $(NCCL_LINK) $(CUDA_RT_LIBS)
endif
# The device component: the CUDA headers first (in CUDA=sim the simulator's cuda_runtime.h and
# nccl.h must win), no MPI.
DEV_CPPFLAGS  = $(CUDA_INC) $(PUB_CPPFLAGS) -Isrc
DEV_CXX      ?= $(CXX)

LIB_CXXFLAGS  := -std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden $(OPT) -g $(WARN) $(SAN)
TEST_CFLAGS   := -std=gnu11 $(OPT) -g $(WARN) $(SAN)
TEST_CXXFLAGS := -std=c++17 $(MPI_CPPFLAGS) $(OPT) -g $(WARN) $(SAN)
DEPFLAGS       = -MMD -MP -MF $@.d
# nvcc: host code through g++ with the library's warnings (-Werror included), device code for
# CUDA_ARCHS. -Wno-... none needed so far; keep the host side as strict as the .cpp files.
NVCC_GENCODE  := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                 -gencode arch=compute_$(lastword $(CUDA_ARCHS)),code=compute_$(lastword $(CUDA_ARCHS))
# --fmad=false: no contraction into fused multiply-adds, so float reductions on the device round
# like the host loops (x86-64 g++ without -mfma never contracts): bit-equal results.
NVCC_FLAGS    := -std=c++17 $(OPT) -g $(NVCC_GENCODE) --expt-relaxed-constexpr --fmad=false \
                 $(if $(filter 1,$(WERROR)),-Werror all-warnings) \
                 -Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wextra$(if $(filter 1,$(WERROR)),$(comma)-Werror)

# Programs link the shared library in the build tree, found at run time through the rpath.
LINK_SHARED = -L$(BUILD)/lib -llocalmap -Wl,-rpath,$(ABS_BUILD)/lib
# Programs that link the static library (unit tests, lm-info, bench/*.cpp) live one folder below
# the build tree (or bin/ of an install) and find the device component in ../lib by their RUNPATH,
# as a user's program linked the same way does: the loader tries the core's object's own search
# path by full name, whoever calls dlopen (mem/component.hpp; ASan's interceptor, for one).
RPATH_LIB   = '-Wl,-rpath,$$ORIGIN/../lib'

# ---------------------------------------------------------------------------------------------
# Sources and products
# ---------------------------------------------------------------------------------------------
# The core: src/ but src/device/ (the device component's own sources, which only it links).
LIB_SRCS   := $(shell find src -name '*.cpp' -not -path 'src/device/*' 2>/dev/null | LC_ALL=C sort)
LIB_OBJS   := $(patsubst src/%.cpp,$(BUILD)/obj/%.o,$(LIB_SRCS))
DEVLIB_NAME := $(LIBNAME)-cuda.so.$(VERSION_MAJOR)
DEVLIB     := $(BUILD)/lib/$(DEVLIB_NAME)
DEV_SRCS   := $(sort $(wildcard src/device/*.cpp))
DEV_CU_SRCS := $(sort $(wildcard src/device/*.cu))
DEV_OBJS   := $(patsubst src/device/%.cpp,$(BUILD)/devobj/%.o,$(DEV_SRCS)) \
              $(patsubst src/device/%.cu,$(BUILD)/devobj/%.cu.o,$(DEV_CU_SRCS))
ifeq ($(CUDA),1)
DEV_PRODUCTS := $(DEVLIB)
endif
PUB_HDRS   := $(wildcard $(addprefix include/,localmap.h localmap_mpi.h localmap_scalapack.h localmap.hpp localmap_api.hpp))
ALL_PUB_HDR_NAMES := localmap.h localmap_mpi.h localmap_scalapack.h localmap.hpp localmap_api.hpp

TEST_C     := $(wildcard tests/test_*.c)
TEST_CXX   := $(wildcard tests/test_*.cpp)
UNIT_CXX   := $(wildcard tests/unit_*.cpp)
TEST_BINS  := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_C)) \
              $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(TEST_CXX))
UNIT_BINS  := $(patsubst tests/%.cpp,$(BUILD)/tests/%,$(UNIT_CXX))
# Device tests (tests/gpu/): built in CUDA builds only; they skip (exit 77) where no GPU is seen.
GPU_TEST_C := $(wildcard tests/gpu/test_*.c)
ifeq ($(CUDA),1)
GPU_BINS   := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(GPU_TEST_C))
TEST_BINS  += $(GPU_BINS)
endif
EX_C       := $(wildcard examples/*.c)
EX_CXX     := $(wildcard examples/*.cpp)
EX_BINS    := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_C)) \
              $(patsubst examples/%.cpp,$(BUILD)/examples/%,$(EX_CXX))
BENCH_C    := $(wildcard bench/*.c)
ifneq ($(CUDA),1)
BENCH_C    := $(filter-out bench/bench_device.c,$(BENCH_C))
endif
# bench_scalapack: against ScaLAPACK's pdgemr2d (the MPI's own ScaLAPACK package) and, with
# COSTA_DIR (an installed COSTA built with COSTA_SCALAPACK), COSTA's costa_pdgemr2d.
SCALAPACK_PC := scalapack-$(if $(filter mpich,$(MPI_PC)),mpich,openmpi)
SCALAPACK_LIBS := $(shell pkg-config --libs $(SCALAPACK_PC) 2>/dev/null)
ifeq ($(SCALAPACK_LIBS),)
BENCH_C    := $(filter-out bench/bench_scalapack.c bench/bench_scalapack_dropin.c,$(BENCH_C))
endif
COSTA_DIR  ?=
COSTA_LINK  = -L$(COSTA_DIR)/lib -Wl,-rpath,$(COSTA_DIR)/lib -lcosta_prefixed_scalapack -lcosta
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_C))
# bench/*.cpp time internals (the planner): src/ headers and the static library, like unit tests.
BENCH_CXX  := $(wildcard bench/*.cpp)
BENCH_BINS += $(patsubst bench/%.cpp,$(BUILD)/bench/%,$(BENCH_CXX))

# liblocalmap_scalapack (scalapack/): ScaLAPACK's p?gemr2d_ served by localmap, a drop-in that
# links liblocalmap and no ScaLAPACK (it finds the program's BLACS, PXERBLA and the reference
# routines at run time); its version script exports those Fortran entry points only.
DROPIN_NAME   := liblocalmap_scalapack
DROPIN_SONAME := $(DROPIN_NAME).so.$(VERSION_MAJOR)
DROPIN_REAL   := $(BUILD)/lib/$(DROPIN_NAME).so.$(VERSION)
DROPIN_SO     := $(BUILD)/lib/$(DROPIN_SONAME)
DROPIN_DEV    := $(BUILD)/lib/$(DROPIN_NAME).so
DROPIN_PC     := $(BUILD)/localmap-scalapack.pc
DROPIN_SRCS   := $(sort $(wildcard scalapack/*.cpp))
DROPIN_OBJS   := $(patsubst scalapack/%.cpp,$(BUILD)/obj-scalapack/%.o,$(DROPIN_SRCS))
# Its man pages, one per routine family (hand-written: docs/man/).
DROPIN_MANS   := $(sort $(wildcard docs/man/localmap_scalapack_*.3))

# ---------------------------------------------------------------------------------------------
# Rebuild when flags change: each stamp file is rewritten only when its content changes
# (the GIT-CFLAGS trick), and what it describes depends on it.
# ---------------------------------------------------------------------------------------------
# (The core's objects do not depend on CUDA: switching CUDA=0/1 in one tree rebuilds the component
# only.)
STAMP_cxx  := $(MPICXX) $(LIB_CPPFLAGS) $(LIB_CXXFLAGS) $(CPPFLAGS) $(CXXFLAGS)
STAMP_link := $(MPICXX) $(SAN) $(LDFLAGS) $(LIB_LDLIBS) $(LDLIBS) $(VERSION) CUDA_SIM=$(CUDA_SIM)
STAMP_dev  := $(DEV_CXX) $(NVCC) $(DEV_CPPFLAGS) $(LIB_CXXFLAGS) $(CPPFLAGS) $(CXXFLAGS) $(NVCC_FLAGS) \
              $(LDFLAGS) $(CUDA_NCCL_LIBS) $(VERSION) CUDA_SIM=$(CUDA_SIM)
STAMP_prog := $(MPICC) $(MPICXX) $(MPIFC) $(COSTA_DIR) $(FFLAGS) $(TEST_CFLAGS) $(TEST_CXXFLAGS) $(CPPFLAGS) $(CFLAGS) $(CXXFLAGS) $(LDFLAGS) $(LDLIBS)
STAMP_pc   := $(PREFIX) $(LIBDIR) $(INCLUDEDIR) $(VERSION) $(MPI_PC) $(LIB_LDLIBS) \
              $(DLPACK_INCLUDE_DIR) $(MPI_C_COMPILER) $(MPI_CXX_COMPILER) $(MPI_Fortran_COMPILER)

STAMPS := $(BUILD)/.stamp-cxx $(BUILD)/.stamp-link $(BUILD)/.stamp-prog $(BUILD)/.stamp-pc \
          $(BUILD)/.stamp-dev
$(STAMPS): $(BUILD)/.stamp-%: FORCE
	@mkdir -p $(@D)
	@if [ x'$(STAMP_$*)' != x"$$(cat $@ 2>/dev/null)" ]; then \
	  printf '%s\n' '$(STAMP_$*)' > $@; fi

.PHONY: FORCE
FORCE:

# deps runs first (order-only) when the goal is all, check or demo.
ifneq ($(filter all check demo,$(or $(MAKECMDGOALS),all)),)
DEPS_FIRST := deps
endif

.PHONY: all lib tests examples info check check-tcp check-multinode check-gpu check-gpu-sim gpu-progs device-component print-cuda demo bench install uninstall clean deps abi-dump abi-check abi-baseline help
.DEFAULT_GOAL := all

all: deps lib tests examples info

lib: $(SHLIB_REAL) $(SHLIB_SO) $(SHLIB_DEV) $(STATICLIB) $(PCFILE) $(CMAKE_CONFIG) $(CMAKE_VERSION_FILE) \
  $(DROPIN_REAL) $(DROPIN_SO) $(DROPIN_DEV) $(DROPIN_PC) $(DEV_PRODUCTS)

tests: $(TEST_BINS) $(UNIT_BINS) $(BUILD)/tests/deny_cma

examples: $(EX_BINS)

# lm-info (tools/lm-info.cpp): the library's diagnostic tool, installed in $(BINDIR).
LM_INFO := $(BUILD)/bin/lm-info
info: $(LM_INFO)

# For `make check` it also sees to the test tools (doxygen, abigail-tools, cmake, ...: --check).
deps:
	@MPICC=$(MPICC) MPICXX=$(MPICXX) LM_MPIRUN=$(MPIRUN) DLPACK_INCLUDE_DIR=$(DLPACK_INCLUDE_DIR) PYTHON=$(PYTHON) \
	  sh tools/ensure-deps.sh $(if $(filter check,$(MAKECMDGOALS)),--check)

# ---------------------------------------------------------------------------------------------
# Library
# ---------------------------------------------------------------------------------------------
$(BUILD)/obj/%.o: src/%.cpp $(BUILD)/.stamp-cxx | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(LIB_CPPFLAGS) $(CPPFLAGS) $(LIB_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -c -o $@ $<

# The device component: src/device/*.cpp with the library's flags against the CUDA (or the
# simulator's) headers, no MPI; src/device/*.cu through nvcc, host code compiled by g++
# underneath (-Werror clean). CUDA=sim: no nvcc; the kernels compile as host C++ against the
# simulator's headers (device/launch.hpp turns launches into CUDASIM_LAUNCH). It links the CUDA
# runtime and NCCL (CUDA=sim: libcudasim) and exports its entry point only (component.map).
$(BUILD)/devobj/%.o: src/device/%.cpp $(BUILD)/.stamp-dev
	@mkdir -p $(@D)
	$(DEV_CXX) $(DEV_CPPFLAGS) $(CPPFLAGS) $(LIB_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -c -o $@ $<
ifeq ($(CUDA_SIM),1)
$(BUILD)/devobj/%.cu.o: src/device/%.cu $(BUILD)/.stamp-dev
	@mkdir -p $(@D)
	$(DEV_CXX) $(DEV_CPPFLAGS) $(CPPFLAGS) $(LIB_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -x c++ -c -o $@ $<
else
$(BUILD)/devobj/%.cu.o: src/device/%.cu $(BUILD)/.stamp-dev
	@mkdir -p $(@D)
	$(NVCC) -ccbin $(CXX_FOR_NVCC) $(DEV_CPPFLAGS) $(CPPFLAGS) $(NVCC_FLAGS) -MMD -MP -MF $@.d -c -o $@ $<
CXX_FOR_NVCC ?= g++
endif

$(DEVLIB): $(DEV_OBJS) src/device/component.map $(BUILD)/.stamp-dev $(if $(filter 1,$(CUDA_SIM)),$(SIM_LIB))
	@mkdir -p $(@D)
	$(DEV_CXX) -shared $(SAN) $(LDFLAGS) -Wl,-soname,$(DEVLIB_NAME) \
	  -Wl,--version-script=src/device/component.map -Wl,--no-undefined -o $@ $(DEV_OBJS) \
	  $(CUDA_NCCL_LIBS) -ldl

$(SHLIB_REAL): $(LIB_OBJS) src/localmap.map $(BUILD)/.stamp-link
	@mkdir -p $(@D)
	$(MPICXX) -shared $(SAN) $(LDFLAGS) -Wl,-soname,$(SONAME) -Wl,--version-script=src/localmap.map \
	  -Wl,--no-undefined -o $@ $(LIB_OBJS) $(LIB_LDLIBS) $(LDLIBS)

$(SHLIB_SO): $(SHLIB_REAL)
	ln -sf $(notdir $<) $@

$(BUILD)/obj-scalapack/%.o: scalapack/%.cpp $(BUILD)/.stamp-cxx | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(PUB_CPPFLAGS) $(MPI_CPPFLAGS) $(CPPFLAGS) $(LIB_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -c -o $@ $<

$(DROPIN_REAL): $(DROPIN_OBJS) scalapack/localmap_scalapack.map $(SHLIB_DEV) $(BUILD)/.stamp-link
	@mkdir -p $(@D)
	$(MPICXX) -shared $(SAN) $(LDFLAGS) -Wl,-soname,$(DROPIN_SONAME) \
	  -Wl,--version-script=scalapack/localmap_scalapack.map -Wl,--no-undefined -o $@ $(DROPIN_OBJS) \
	  -L$(BUILD)/lib -llocalmap -Wl,-rpath,'$$ORIGIN' -ldl $(LDLIBS)

$(DROPIN_SO): $(DROPIN_REAL)
	ln -sf $(notdir $<) $@

$(DROPIN_DEV): $(DROPIN_SO)
	ln -sf $(notdir $<) $@

$(SHLIB_DEV): $(SHLIB_SO)
	ln -sf $(notdir $<) $@

$(STATICLIB): $(LIB_OBJS)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $(LIB_OBJS)

# The .pc file and the CMake package, with the install paths, the MPI and the DLPack of this build.
SUBST = sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' -e 's|@VERSION_MAJOR@|$(VERSION_MAJOR)|g' \
	    -e 's|@MPI_REQUIRES@|$(MPI_PC)|g' -e 's|@LIBS_PRIVATE@|$(LIB_LDLIBS)|g' \
	    -e 's|@DLPACK_INCLUDE_DIR@|$(DLPACK_INCLUDE_DIR)|g' -e 's|@MPI_C_COMPILER@|$(MPI_C_COMPILER)|g' \
	    -e 's|@MPI_CXX_COMPILER@|$(MPI_CXX_COMPILER)|g' -e 's|@MPI_Fortran_COMPILER@|$(MPI_Fortran_COMPILER)|g' \
	    -e 's|@LIBS_PRIVATE_CMAKE@|$(strip $(patsubst -l%,%,$(filter -l%,$(LIB_LDLIBS))))|g' \
	    -e 's|@LIBDIRS_PRIVATE_CMAKE@|$(strip $(patsubst -L%,%,$(filter -L%,$(LIB_LDLIBS))))|g'

$(PCFILE): pkgconfig/localmap.pc.in $(BUILD)/.stamp-pc
	@mkdir -p $(@D)
	$(SUBST) $< > $@

$(DROPIN_PC): pkgconfig/localmap-scalapack.pc.in $(BUILD)/.stamp-pc
	@mkdir -p $(@D)
	$(SUBST) $< > $@

$(BUILD)/cmake/%.cmake: cmake/%.cmake.in $(BUILD)/.stamp-pc
	@mkdir -p $(@D)
	$(SUBST) $< > $@

# ---------------------------------------------------------------------------------------------
# Tests, examples, benchmarks
# ---------------------------------------------------------------------------------------------
PROG_DEPS := $(SHLIB_DEV) $(BUILD)/.stamp-prog

$(BUILD)/tests/%: tests/%.c $(PROG_DEPS) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Itests $(CPPFLAGS) $(TEST_CFLAGS) $(CFLAGS) $(DEPFLAGS) -o $@ $< \
	  $(LINK_SHARED) $(SAN) $(LDFLAGS) -lcmocka -lm $(LDLIBS)

# The drop-in's differential test calls p?gemr2d_ of liblocalmap_scalapack (linked) and of
# ScaLAPACK (dlopen'ed at run time, so that it builds without ScaLAPACK and skips there); it
# exports its own PXERBLA (-rdynamic) to see the codes the drop-in reports.
$(BUILD)/tests/test_scalapack_dropin: $(DROPIN_DEV)
$(BUILD)/tests/test_scalapack_dropin: LDLIBS += -rdynamic -llocalmap_scalapack -ldl

# A wrapper, not a test: runs a rank program with process_vm_readv/writev refused (seccomp), as a
# restricted host does (tests/script_node_local.sh). No localmap, no sanitizers.
$(BUILD)/tests/deny_cma: tests/deny_cma.c $(BUILD)/.stamp-prog | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICC) -std=gnu11 $(OPT) -g $(WARN) $(CPPFLAGS) -o $@ $<

# Device tests use the CUDA runtime directly to make and check device data, and link NCCL and
# export their symbols (-rdynamic), so that a test may interpose NCCL calls the library makes
# through its device component (RTLD_NEXT finds NCCL in the global scope).
$(BUILD)/tests/gpu/%: tests/gpu/%.c tests/gpu/gpu_test.h $(PROG_DEPS) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Itests -Itests/gpu $(CUDA_INC) $(CPPFLAGS) $(TEST_CFLAGS) $(CFLAGS) \
	  $(DEPFLAGS) -rdynamic -o $@ $< $(LINK_SHARED) $(SAN) $(LDFLAGS) -Wl,--no-as-needed \
	  $(CUDA_NCCL_LIBS) -Wl,--as-needed -lcmocka -lm $(LDLIBS)

# lm-info reads the internals it reports: the static library and src/ headers, like unit tests.
$(LM_INFO): tools/lm-info.cpp $(STATICLIB) $(BUILD)/.stamp-prog | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(filter-out $(MPI_CPPFLAGS),$(LIB_CPPFLAGS)) $(CPPFLAGS) $(TEST_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) \
	  -o $@ $< $(STATICLIB) $(SAN) $(LDFLAGS) $(RPATH_LIB) $(LIB_LDLIBS) $(LDLIBS)

# unit_*.cpp test internals: they may include src/ headers and link the static library.
$(BUILD)/tests/unit_%: tests/unit_%.cpp $(STATICLIB) $(BUILD)/.stamp-prog | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) -Itests $(filter-out $(MPI_CPPFLAGS),$(LIB_CPPFLAGS)) $(CPPFLAGS) $(TEST_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) \
	  -o $@ $< $(STATICLIB) $(SAN) $(LDFLAGS) $(RPATH_LIB) $(LIB_LDLIBS) -lcmocka $(LDLIBS)

$(BUILD)/tests/%: tests/%.cpp $(PROG_DEPS) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(PUB_CPPFLAGS) -Itests $(CPPFLAGS) $(TEST_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -o $@ $< \
	  $(LINK_SHARED) $(SAN) $(LDFLAGS) -lcmocka $(LDLIBS)

# The C++ tests prove the public headers (and the typed local_map) compile as ISO C++ (no
# compound literals).
$(BUILD)/tests/test_cpp $(BUILD)/tests/test_cpp_local_map: TEST_CXXFLAGS += -Wpedantic

$(BUILD)/examples/%: examples/%.c $(PROG_DEPS) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) $(CPPFLAGS) $(TEST_CFLAGS) $(CFLAGS) $(DEPFLAGS) -o $@ $< \
	  $(LINK_SHARED) $(SAN) $(LDFLAGS) -lm $(LDLIBS)

$(BUILD)/examples/%: examples/%.cpp $(PROG_DEPS) | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(PUB_CPPFLAGS) $(CPPFLAGS) $(TEST_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) -o $@ $< \
	  $(LINK_SHARED) $(SAN) $(LDFLAGS) $(LDLIBS)

$(BUILD)/bench/%: bench/%.c $(PROG_DEPS)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Ibench $(CPPFLAGS) $(TEST_CFLAGS) $(CFLAGS) $(DEPFLAGS) -o $@ $< \
	  $(LINK_SHARED) $(SAN) $(LDFLAGS) -lm $(LDLIBS)

$(BUILD)/bench/%: bench/%.cpp $(STATICLIB) $(BUILD)/.stamp-prog | $(DEPS_FIRST)
	@mkdir -p $(@D)
	$(MPICXX) $(filter-out $(MPI_CPPFLAGS),$(LIB_CPPFLAGS)) $(CPPFLAGS) $(TEST_CXXFLAGS) $(CXXFLAGS) $(DEPFLAGS) \
	  -o $@ $< $(STATICLIB) $(SAN) $(LDFLAGS) $(RPATH_LIB) $(LIB_LDLIBS) $(LDLIBS)

$(BUILD)/bench/bench_scalapack: bench/bench_scalapack.c $(PROG_DEPS)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Ibench $(if $(COSTA_DIR),-DLM_WITH_COSTA) $(CPPFLAGS) $(TEST_CFLAGS) \
	  $(CFLAGS) $(DEPFLAGS) -o $@ $< $(LINK_SHARED) $(SAN) $(LDFLAGS) \
	  $(if $(COSTA_DIR),$(COSTA_LINK)) \
	  $(SCALAPACK_LIBS) -lm $(LDLIBS)

# The drop-in against Debian's pdgemr2d/pdtran: links ScaLAPACK, opens the drop-in with dlopen.
$(BUILD)/bench/bench_scalapack_dropin: bench/bench_scalapack_dropin.c $(PROG_DEPS) $(DROPIN_DEV)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Ibench -DLM_DROPIN_PATH='"$(ABS_BUILD)/lib/$(DROPIN_NAME).so"' $(CPPFLAGS) \
	  $(TEST_CFLAGS) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(SAN) $(LDFLAGS) $(SCALAPACK_LIBS) -ldl -lm $(LDLIBS)

# The device bench calls NCCL collectives itself as the baseline.
$(BUILD)/bench/bench_device: bench/bench_device.c $(PROG_DEPS)
	@mkdir -p $(@D)
	$(MPICC) $(PUB_CPPFLAGS) -Ibench $(CUDA_INC) $(CPPFLAGS) $(TEST_CFLAGS) $(CFLAGS) $(DEPFLAGS) \
	  -o $@ $< $(LINK_SHARED) $(SAN) $(LDFLAGS) $(CUDA_NCCL_LIBS) -lm $(LDLIBS)

# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------
# Environment of every run (tests, demo, bench).
# MPI too, so that a script test calling make (with MAKEFLAGS unset) stays on the same MPI.
# LM_MPI_FLAVOR spares tools/lm-mpirun asking the launcher (--version) at every run.
RUN_ENV := BUILD=$(BUILD) LM_MPIRUN=$(MPIRUN) LM_MPI=$(MPI) MPI=$(MPI) MPIFC=$(MPIFC) \
           LM_MPI_FLAVOR=$(if $(filter mpich,$(MPI_PC)),mpich,openmpi)
ifeq ($(ASAN),1)
# OpenMPI leaks at exit are known (tests/lsan.supp). fast_unwind_on_malloc=0: full stacks through
# dlclose()d MCA components, so the suppressions match.
RUN_ENV += LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp$(if $(LSAN_OPTIONS),:$(LSAN_OPTIONS)) \
           ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0$(if $(ASAN_OPTIONS),:$(ASAN_OPTIONS))
endif
ifeq ($(ASAN)$(CUDA),11)
# The CUDA driver maps memory in ASan's shadow gap; without a GPU nothing is mapped, but the
# device runs need it (docs/DESIGN.md, "Devices").
RUN_ENV += ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:protect_shadow_gap=0$(if $(ASAN_OPTIONS),:$(ASAN_OPTIONS))
endif
ifeq ($(UBSAN),1)
RUN_ENV += UBSAN_OPTIONS=print_stacktrace=1$(if $(UBSAN_OPTIONS),:$(UBSAN_OPTIONS))
endif
# Whether the tests expect a GPU, never decided by the library under test: never in a CUDA=0
# build, always on the simulator, else as LM_EXPECT_GPU=0|1 says (CI and tests/gpu/device-check.sh
# set it) or, unset, as tests/run-tests.sh decides (the build, nvidia-smi).
ifeq ($(CUDA_SIM),1)
RUN_ENV += LM_EXPECT_GPU=1
else ifeq ($(CUDA),0)
RUN_ENV += LM_EXPECT_GPU=0
else ifneq ($(LM_EXPECT_GPU),)
RUN_ENV += LM_EXPECT_GPU=$(LM_EXPECT_GPU)
endif

ifneq ($(CUDA_SIM),1)
check: all
	$(RUN_ENV) bash tests/run-tests.sh $(TESTS)

check-gpu-sim:
	$(MAKE) CUDA=sim $@
else
# CUDA=sim: the programs' suite (unit, MPI and device tests; the script tests build and install
# real trees, and this one is not installable), then the simulator's self-tests and tests/gpu in
# the other topologies (tests/sim/check-gpu-sim.sh; the default one, per-rank, ran in the suite).
check: all sim-tests gpu-progs
	$(RUN_ENV) bash tests/run-tests.sh $(or $(TESTS),'unit_*' 'test_*')
	$(RUN_ENV) bash tests/sim/run-sim-tests.sh
	$(RUN_ENV) SIM_CONFIGS="$(or $(SIM_CONFIGS),shared:1 shared:4 staging no-colls)" bash tests/sim/check-gpu-sim.sh

# The device path on the simulator: its self-tests, the CPU tests that pin the device answer
# (also on a machine without a GPU: CUDASIM_DEVICES=0, the CUDA build's "no GPU on this machine"),
# tests/gpu at np 1, 2, 4 in every topology (SIM_CONFIGS), a bench_device run.
check-gpu-sim: sim-tests gpu-progs $(BUILD)/tests/test_device_api $(BUILD)/tests/test_api_misc
	$(RUN_ENV) bash tests/sim/run-sim-tests.sh
	$(RUN_ENV) NPS="1 2" bash tests/run-tests.sh test_device_api test_api_misc unit_device_ops
	$(RUN_ENV) LM_EXPECT_GPU=0 CUDASIM_DEVICES=0 NPS="1 2" bash tests/run-tests.sh test_device_api test_api_misc
	$(RUN_ENV) $(if $(SIM_CONFIGS),SIM_CONFIGS="$(SIM_CONFIGS)") bash tests/sim/check-gpu-sim.sh
endif

# The whole suite over TCP only (no shared-memory BTL): what a multi-node job sees. Extra mpirun
# flags also work directly: LM_MPIRUN_FLAGS="--mca btl tcp,self" make check (tools/lm-mpirun).
check-tcp:
	LM_MPIRUN_FLAGS="--mca btl tcp,self $(LM_MPIRUN_FLAGS)" $(MAKE) check

# Simulated nodes (tests/README.md): LM_TEST_NODES=$(NODES) (default 2) splits this machine's ranks
# into nodes (world rank r on node r % NODES; a test-only hook of the node probe), and OpenMPI runs
# over TCP only, so that agreements over sets that span nodes go through MPI, each node has its own
# board, and transfers mix node-local and remote peers: the paths of a multi-node job. By default
# the MPI tests, the examples and the transport scripts (TESTS=... for others).
MULTINODE_TESTS := 'test_*' script_staging script_node_local script_fault \
                   $(shell awk '!/^\#/ && NF { printf "%s ", $$1 }' tests/examples.list 2>/dev/null)
check-multinode:
	LM_TEST_NODES=$(or $(NODES),2) \
	LM_MPIRUN_FLAGS="$(if $(filter mpich,$(MPI)),,--mca btl tcp,self) $(LM_MPIRUN_FLAGS)" \
	  $(MAKE) check TESTS="$(or $(TESTS),$(MULTINODE_TESTS))"

# Device tests only (tests/gpu/), at NPS (default "1 2 4"). NCCL_SPLIT_HOSTS=1 gives each rank its
# own NCCL_HOSTID (and NCCL_SOCKET_IFNAME=lo), so several ranks on ONE GPU run real NCCL.
# What a device run needs, and nothing else (tests/gpu/device-check.sh builds this).
gpu-progs: lib $(GPU_BINS) $(BUILD)/tests/unit_device_ops $(LM_INFO) \
           $(if $(filter 1,$(CUDA)),$(BUILD)/bench/bench_device)

# The device component alone (tests/gpu/prepare-kit.sh builds it into the kit): needs CUDA.
device-component:
ifeq ($(CUDA),1)
	$(MAKE) --no-print-directory $(DEVLIB)
	@echo "device-component: $(DEVLIB)"
else
	@echo "device-component: CUDA=$(CUDA): no nvcc with nccl.h under CUDA_HOME=$(CUDA_HOME) (CUDA=1 requires them)"; exit 1
endif

check-gpu: deps gpu-progs
ifeq ($(CUDA),1)
	$(RUN_ENV) NPS="$(or $(NPS),1 2 4)" LM_TEST_GPU_ONLY=1 $(if $(filter 1,$(NCCL_SPLIT_HOSTS)),LM_NCCL_SPLIT_HOSTS=1) \
	  bash tests/run-tests.sh $(or $(TESTS),'test_gpu_*')
else
	@echo "check-gpu: CUDA=0 build (nvcc or nccl.h not found under CUDA_HOME=$(CUDA_HOME)): nothing to run"
	@echo "0 passed, 0 failed, 1 skipped"
endif

demo: deps $(BUILD)/examples/demo
	$(RUN_ENV) bash tools/lm-mpirun $(or $(NP),4) $(BUILD)/examples/demo $(ARGS)

bench: $(BENCH_BINS)
	@if [ -x bench/run.sh ]; then $(RUN_ENV) bench/run.sh; \
	 elif [ -f bench/run.sh ]; then $(RUN_ENV) bash bench/run.sh; \
	 else echo "bench: built $(words $(BENCH_BINS)) program(s) in $(BUILD)/bench; no bench/run.sh"; fi

# ---------------------------------------------------------------------------------------------
# Install
# ---------------------------------------------------------------------------------------------
# Under $(DOCDIR): README.md, LICENSE, docs/ (the language guides, troubleshooting, the Fortran reference, the ScaLAPACK drop-in), examples/ (the sources with a Makefile that builds them
# against the installed tree through pkg-config; the Fortran ones in examples/fortran/ when the
# Fortran bindings are built; the ScaLAPACK ones in examples/scalapack/, built by that Makefile where
# pkg-config finds a ScaLAPACK; examples/cmake-cxx/, a C++-only CMake project), and, where doxygen
# builds them, the HTML API references (html/ for C and C++, fortran/ for the Fortran module). The man pages under $(MANDIR)/man3: localmap(3) and
# one page per function. The CMake package under $(CMAKEDIR). tools/lm-mpirun as
# $(BINDIR)/lm-mpirun, its default launcher the one of this build's MPI.
DOC_FILES  := README.md LICENSE
# The pages the README links to for users (the language guides, troubleshooting, the Fortran
# reference, the ScaLAPACK drop-in), under $(DOCDIR)/docs so that the installed README's links hold.
DOC_GUIDES := $(sort $(wildcard docs/guide-*.md docs/troubleshooting.md docs/fortran-reference.md docs/SCALAPACK.md))
EX_FILES   := $(sort $(wildcard examples/*.c examples/*.cpp examples/*.h examples/README.md))
EX_SCALAPACK_FILES := $(sort $(wildcard examples/scalapack/*.c examples/scalapack/*.f90))
EX_CMAKE_CXX_FILES := $(sort $(wildcard examples/cmake-cxx/CMakeLists.txt examples/cmake-cxx/*.cpp))
MAN_FUNCS   = $(shell sh tools/gen-manpage.sh --list)
HAVE_DOXYGEN = $(shell command -v $(DOXYGEN) 2>/dev/null)

install: lib $(MANPAGE) $(LM_INFO)
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/examples/scalapack \
	  $(DESTDIR)$(DOCDIR)/examples/cmake-cxx $(DESTDIR)$(DOCDIR)/docs \
	  $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(BINDIR)
	$(INSTALL) -m 755 $(SHLIB_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(SHLIB_REAL)) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/$(LIBNAME).so
	$(INSTALL) -m 644 $(STATICLIB) $(DESTDIR)$(LIBDIR)/
	$(if $(DEV_PRODUCTS),$(INSTALL) -m 755 $(DEVLIB) $(DESTDIR)$(LIBDIR)/)
	$(INSTALL) -m 644 $(PUB_HDRS) $(DESTDIR)$(INCLUDEDIR)/
	$(INSTALL) -m 644 $(PCFILE) $(DESTDIR)$(PKGCONFIGDIR)/localmap.pc
	$(INSTALL) -m 755 $(DROPIN_REAL) $(DESTDIR)$(LIBDIR)/
	ln -sf $(notdir $(DROPIN_REAL)) $(DESTDIR)$(LIBDIR)/$(DROPIN_SONAME)
	ln -sf $(DROPIN_SONAME) $(DESTDIR)$(LIBDIR)/$(DROPIN_NAME).so
	$(INSTALL) -m 644 $(DROPIN_PC) $(DESTDIR)$(PKGCONFIGDIR)/localmap-scalapack.pc
	$(INSTALL) -d $(DESTDIR)$(MANDIR)/man3
	$(INSTALL) -m 644 $(DROPIN_MANS) $(DESTDIR)$(MANDIR)/man3/
	$(INSTALL) -m 644 $(CMAKE_CONFIG) $(CMAKE_VERSION_FILE) $(DESTDIR)$(CMAKEDIR)/
	$(INSTALL) -m 644 $(DOC_FILES) $(DESTDIR)$(DOCDIR)/
	$(INSTALL) -m 644 $(DOC_GUIDES) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -m 644 $(EX_FILES) $(DESTDIR)$(DOCDIR)/examples/
	$(INSTALL) -m 644 $(EX_SCALAPACK_FILES) $(DESTDIR)$(DOCDIR)/examples/scalapack/
	$(INSTALL) -m 644 $(EX_CMAKE_CXX_FILES) $(DESTDIR)$(DOCDIR)/examples/cmake-cxx/
	$(INSTALL) -m 644 examples/Makefile.installed $(DESTDIR)$(DOCDIR)/examples/Makefile
	$(INSTALL) -m 644 $(MANPAGE) $(MAN3DIR)/lm_*.3 $(DESTDIR)$(MANDIR)/man3/
	sed -e 's|^launcher=$${LM_MPIRUN:-mpirun}$$|launcher=$${LM_MPIRUN:-$(MPIRUN)}|' tools/lm-mpirun \
	  > $(DESTDIR)$(BINDIR)/lm-mpirun.tmp && chmod 755 $(DESTDIR)$(BINDIR)/lm-mpirun.tmp && \
	  mv $(DESTDIR)$(BINDIR)/lm-mpirun.tmp $(DESTDIR)$(BINDIR)/lm-mpirun
	$(INSTALL) -m 755 $(LM_INFO) $(DESTDIR)$(BINDIR)/lm-info
	@if [ -n "$(HAVE_DOXYGEN)" ] && $(MAKE) --no-print-directory -s $(DOCS_HTML) $(DOCS_FORTRAN) >/dev/null 2>&1; then \
	  $(INSTALL) -d $(DESTDIR)$(DOCDIR)/html $(DESTDIR)$(DOCDIR)/fortran && \
	  cp -R $(BUILD)/docs/html/. $(DESTDIR)$(DOCDIR)/html/ && \
	  cp -R $(BUILD)/docs/fortran/html/. $(DESTDIR)$(DOCDIR)/fortran/ && \
	  echo "install: HTML API references in $(DESTDIR)$(DOCDIR)/html and $(DESTDIR)$(DOCDIR)/fortran"; \
	else echo "install: the HTML API references are not installed ($(if $(HAVE_DOXYGEN),make docs fails: run it to see why,no $(DOXYGEN): apt-get install doxygen))"; fi

# Removes what install put there, then the directories that are localmap's own once empty.
uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/$(LIBNAME).so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME) \
	      $(DESTDIR)$(LIBDIR)/$(LIBNAME).so $(DESTDIR)$(LIBDIR)/$(LIBNAME).a \
	      $(DESTDIR)$(LIBDIR)/$(DEVLIB_NAME) \
	      $(addprefix $(DESTDIR)$(INCLUDEDIR)/,$(ALL_PUB_HDR_NAMES)) \
	      $(DESTDIR)$(PKGCONFIGDIR)/localmap.pc \
	      $(DESTDIR)$(LIBDIR)/$(DROPIN_NAME).so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(DROPIN_SONAME) \
	      $(DESTDIR)$(LIBDIR)/$(DROPIN_NAME).so $(DESTDIR)$(PKGCONFIGDIR)/localmap-scalapack.pc \
	      $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(notdir $(DROPIN_MANS))) \
	      $(DESTDIR)$(CMAKEDIR)/localmapConfig.cmake $(DESTDIR)$(CMAKEDIR)/localmapConfigVersion.cmake \
	      $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOC_FILES)) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/docs/,$(notdir $(DOC_GUIDES))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/examples/,$(notdir $(EX_FILES)) Makefile) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/examples/scalapack/,$(notdir $(EX_SCALAPACK_FILES))) \
	      $(addprefix $(DESTDIR)$(DOCDIR)/examples/cmake-cxx/,$(notdir $(EX_CMAKE_CXX_FILES))) \
	      $(DESTDIR)$(MANDIR)/man3/localmap.3 $(addprefix $(DESTDIR)$(MANDIR)/man3/,$(addsuffix .3,$(MAN_FUNCS))) \
	      $(DESTDIR)$(BINDIR)/lm-mpirun $(DESTDIR)$(BINDIR)/lm-info
	rm -rf $(DESTDIR)$(DOCDIR)/html $(DESTDIR)$(DOCDIR)/fortran
	-rmdir $(DESTDIR)$(CMAKEDIR) $(DESTDIR)$(DOCDIR)/examples/scalapack $(DESTDIR)$(DOCDIR)/examples/cmake-cxx \
	  $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR)/docs \
	  $(DESTDIR)$(DOCDIR) 2>/dev/null

# ---------------------------------------------------------------------------------------------
# Documentation: `make docs` = the HTML reference of the C and C++ headers in $(BUILD)/docs/html
# (doxygen with warnings as errors: an undocumented public item fails), the Fortran module's in
# $(BUILD)/docs/fortran/html (an undocumented public procedure, generic or type fails), the
# man pages: $(BUILD)/docs/localmap.3 and one per function in $(BUILD)/docs/man3
# (`man -l build/docs/man3/lm_dist_tensor_reshard.3`), the Fortran reference as markdown,
# docs/fortran-reference.md (fortran-ref), and the Rust crates' in $(BUILD)/docs/rust (rust-doc,
# after the bindings' rules below). tests/script_docs.sh and tests/script_man.sh check them.
# ---------------------------------------------------------------------------------------------
.PHONY: docs man fortran-ref
docs: $(MANPAGE) $(DOCS_HTML) $(DOCS_FORTRAN) fortran-ref rust-doc
	@echo "docs: $(DOCS_HTML), $(DOCS_FORTRAN), $(MANPAGE), $(MAN3DIR)/lm_*.3, docs/fortran-reference.md$(if $(RUST_DOC_CARGO),$(comma) $(BUILD)/docs/rust/localmap/index.html)"

man: $(MANPAGE)

# The Fortran module's reference as plain markdown (readable without a browser), generated from
# bindings/fortran/localmap.f90 and its .inc files (its sections: include/localmap.h's) and committed;
# rewritten only when it changes.
fortran-ref:
	python3 tools/gen-fortran-ref.py

# localmap(3) and, as a side product, $(MAN3DIR)/<function>.3 for every function.
$(MANPAGE): docs/localmap.3.in docs/man-examples.txt tools/gen-manpage.sh $(PUB_HDRS)
	@mkdir -p $(@D)
	sh tools/gen-manpage.sh $(VERSION) $@ $(MAN3DIR)

$(DOCS_HTML): docs/Doxyfile docs/api-mainpage.md $(PUB_HDRS)
	@command -v $(DOXYGEN) >/dev/null 2>&1 || { echo "docs: $(DOXYGEN) not found (apt-get install doxygen)"; exit 1; }
	@mkdir -p $(BUILD)/docs
	( cat docs/Doxyfile; echo "PROJECT_NUMBER = $(VERSION)"; echo "OUTPUT_DIRECTORY = $(BUILD)/docs" ) | $(DOXYGEN) -

# Two runs: the check (EXTRACT_ALL = NO: Doxygen names what has no `!>` comment; named constants
# and the per-kind procedures behind the generics need none), then the pages (EXTRACT_ALL = YES:
# constants listed with their values).
F_DOC_SRCS := docs/Doxyfile.fortran docs/fortran-mainpage.md bindings/fortran/localmap.f90 \
              $(wildcard bindings/fortran/*.inc) tools/doxygen-fortran-includes.sh
$(DOCS_FORTRAN): $(F_DOC_SRCS)
	@command -v $(DOXYGEN) >/dev/null 2>&1 || { echo "docs: $(DOXYGEN) not found (apt-get install doxygen)"; exit 1; }
	@mkdir -p $(BUILD)/docs/fortran
	@( cat docs/Doxyfile.fortran; echo "OUTPUT_DIRECTORY = $(BUILD)/docs/fortran"; \
	   echo "EXTRACT_ALL = NO"; echo "GENERATE_HTML = NO" ) | $(DOXYGEN) - 2>&1 | \
	  grep 'is not documented' | grep -v '(variable)\|of interface\|_final_ (function)' \
	  > $(BUILD)/docs/fortran/undocumented.txt || true
	@if [ -s $(BUILD)/docs/fortran/undocumented.txt ]; then cat $(BUILD)/docs/fortran/undocumented.txt; \
	  echo "docs: the Fortran module has public items without a !> comment (above)"; exit 1; fi
	( cat docs/Doxyfile.fortran; echo "PROJECT_NUMBER = $(VERSION)"; echo "OUTPUT_DIRECTORY = $(BUILD)/docs/fortran" ) | $(DOXYGEN) -

# ---------------------------------------------------------------------------------------------
# ABI
# ---------------------------------------------------------------------------------------------
# (tests/script_abi.sh dumps its baseline with the same abidw flags.)
abi-dump: $(SHLIB_REAL)
	$(ABIDW) --no-corpus-path --headers-dir include --drop-private-types --out-file $(ABIFILE) $(SHLIB_REAL)
	@echo "abi-dump: $(ABIFILE)"

# abidiff's exit status is a bit mask: 1/2 = error, 4 = an ABI change, 8 = an incompatible one
# (a removed symbol). abi-check fails on any of them. Added functions are compatible and not
# counted (--no-added-syms), nor are enumerators appended to an enum (libabigail filters them as
# harmless), nor fields appended to a versioned config struct (abi/localmap.abignore). Both sides
# compare public types only (--headers-dir): a private C++ class is not the ABI.
ABI_SUPPRESSIONS ?= abi/localmap.abignore
ABIDIFF_FLAGS ?= --headers-dir1 include --headers-dir2 include --no-added-syms \
                 $(if $(wildcard $(ABI_SUPPRESSIONS)),--suppressions $(ABI_SUPPRESSIONS))
abi-check: abi-dump
	@if [ ! -f $(ABI_BASELINE) ]; then echo "abi-check: no $(ABI_BASELINE) (make abi-baseline starts one)"; exit 1; fi
	@rc=0; $(ABIDIFF) $(ABIDIFF_FLAGS) $(ABI_BASELINE) $(ABIFILE) || rc=$$?; \
	if [ $$rc -ne 0 ]; then \
	  echo "abi-check: INCOMPATIBLE with $(ABI_BASELINE) (abidiff status $$rc): bump LM_VERSION_MAJOR (the SONAME) or, if intended before a release, make abi-baseline (docs/DESIGN.md, ABI)"; exit 1; \
	else echo "abi-check: compatible with $(ABI_BASELINE)"; fi

# The baseline of the current release: at a release (or after an intended ABI break with a new
# SONAME), regenerate it from a plain build and commit abi/localmap.abi.
abi-baseline: abi-dump
	@mkdir -p $(dir $(ABI_BASELINE))
	cp $(ABIFILE) $(ABI_BASELINE)
	@echo "abi-baseline: $(ABI_BASELINE) from $(SHLIB_REAL) (commit it)"

clean:
	rm -rf $(BUILD)

# What CUDA=auto resolved to here (1 or 0; sim in CUDA=sim): for scripts.
# The binding layers generated from api/localmap.api (tools/api.py; script_api checks them).
.PHONY: api-generate
api-generate:
	python3 tools/api.py write
	python3 tools/gen-fortran-ref.py

print-cuda:
	@echo $(if $(filter 1,$(CUDA_SIM)),sim,$(CUDA))

help:
	@sed -n '2,/^$$/p' Makefile

# Language bindings: each bindings/<lang>/rules.mk adds its targets; tests/script_<lang>.sh runs
# its tests from make check.
-include $(wildcard bindings/*/rules.mk)

# The Rust crates' reference (cargo doc, offline, rustdoc warnings as errors) in $(BUILD)/docs/rust
# (localmap/index.html, localmap_sys/index.html), built in $(BUILD)/rust-target like `make rust`
# (its build script links the library); without cargo or bindings/rust, a message instead.
comma := ,
RUST_DOC_CARGO := $(if $(wildcard bindings/rust/Cargo.toml),$(CARGO))
.PHONY: rust-doc
rust-doc: $(if $(RUST_DOC_CARGO),lib)
ifneq ($(RUST_DOC_CARGO),)
	cd bindings/rust && CARGO_TARGET_DIR=$(ABS_BUILD)/rust-target LOCALMAP_LIB_DIR=$(ABS_BUILD)/lib \
	  $(if $(filter 1,$(ASAN) $(UBSAN)),LOCALMAP_LINK=dynamic) LOCALMAP_INCLUDE_DIR=$(CURDIR)/include \
	  RUSTDOCFLAGS="-D warnings" $(CARGO) doc --offline --no-deps --workspace
	rm -rf $(BUILD)/docs/rust && mkdir -p $(BUILD)/docs/rust && cp -R $(BUILD)/rust-target/doc/. $(BUILD)/docs/rust/
	@echo "rust-doc: $(BUILD)/docs/rust/localmap/index.html"
else
	@echo "rust-doc: $(if $(wildcard bindings/rust/Cargo.toml),no cargo (https://rustup.rs or apt-get install cargo),no bindings/rust): the Rust reference is not built"
endif

# libFuzzer targets: make fuzz FUZZ_SECONDS=N (fuzz/fuzz.mk).
include fuzz/fuzz.mk

-include $(LIB_OBJS:=.d) $(DEV_OBJS:=.d) $(DROPIN_OBJS:=.d) $(addsuffix .d,$(TEST_BINS) $(UNIT_BINS) $(EX_BINS) $(BENCH_BINS))

-include tests/sim/sim.mk
