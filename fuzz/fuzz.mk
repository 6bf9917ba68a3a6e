# SPDX-License-Identifier: BSD-3-Clause
# libFuzzer targets (issue 8): `make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="fuzz_layout ..."]`.
# Builds the library and fuzz/fuzz_*.cpp with Debian's clang 14 (-fsanitize=fuzzer,address,
# undefined) into $(FUZZ_BUILD) (never mixed with build/), then runs each target for FUZZ_SECONDS
# on a corpus in $(FUZZ_BUILD)/corpus/<target>, seeded from fuzz/corpus/<target>. A crash leaves
# crash-* / leak-* files in $(FUZZ_BUILD) and fails the target; turn each into a regression test.
FUZZ_CXX      ?= clang++-14
FUZZ_BUILD    ?= build-fuzz
FUZZ_SECONDS  ?= 60
FUZZ_TARGETS  ?= $(patsubst fuzz/%.cpp,%,$(wildcard fuzz/fuzz_*.cpp))
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_MPI_CPP   = $(shell $(MPICXX) --showme:compile 2>/dev/null)
FUZZ_MPI_LD    = $(shell $(MPICXX) --showme:link 2>/dev/null)
FUZZ_CXXFLAGS  = -std=c++17 -O1 -g -Wall -Wextra $(FUZZ_SAN) -Iinclude -Isrc $(MPI_CPPFLAGS) $(FUZZ_MPI_CPP) $(filter-out -DLM_WITH_CUDA -I$(CUDA_HOME)/include,$(LIB_CPPFLAGS))
FUZZ_LIB_OBJS := $(patsubst src/%.cpp,$(FUZZ_BUILD)/obj/%.o,$(LIB_SRCS))
FUZZ_BINS     := $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))

.PHONY: fuzz fuzz-build
.SECONDARY: $(FUZZ_LIB_OBJS)
fuzz-build: $(FUZZ_BINS)

$(FUZZ_BUILD)/obj/%.o: src/%.cpp
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -fvisibility=hidden -MMD -MP -MF $@.d -c -o $@ $<

$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.cpp fuzz/fuzz_common.hpp $(FUZZ_LIB_OBJS)
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB_OBJS) $(FUZZ_MPI_LD)

# OpenMPI's own leaks at exit are suppressed as in the test suite (fuzz_api runs a singleton MPI).
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t; \
	  if [ -d fuzz/corpus/$$t ]; then cp -n fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/ 2>/dev/null || true; fi; \
	  echo "== $$t for $(FUZZ_SECONDS) s (log: $(FUZZ_BUILD)/$$t.log)"; \
	  ( cd $(FUZZ_BUILD) && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	    OMPI_MCA_btl_vader_single_copy_mechanism=none \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:fast_unwind_on_malloc=0 \
	    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	    ./$$t -max_total_time=$(FUZZ_SECONDS) -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
	      corpus/$$t > $$t.log 2>&1 ); rc=$$?; \
	  tail -n 30 $(FUZZ_BUILD)/$$t.log; \
	  if [ $$rc != 0 ]; then echo "fuzz: $$t FAILED (exit $$rc; reproducer crash-*/leak-*/timeout-* in $(FUZZ_BUILD))"; exit 1; fi; \
	done; echo "fuzz: every target ran $(FUZZ_SECONDS) s without a finding"

-include $(FUZZ_LIB_OBJS:=.d)
