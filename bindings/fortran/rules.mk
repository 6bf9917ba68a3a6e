# SPDX-License-Identifier: BSD-3-Clause
# The Fortran bindings (included by the top Makefile): the module `localmap` built with $(MPIFC).
#
#   make fortran      $(BUILD)/fortran/include/localmap.mod, $(BUILD)/fortran/lib/liblocalmap_fortran.a,
#                     the tests and the masked-loss example (tests/script_fortran.sh runs them)
#   make install      also installs localmap.mod to $(INCLUDEDIR), liblocalmap_fortran.a to $(LIBDIR),
#                     and the examples to $(DOCDIR)/examples/fortran (the installed examples
#                     Makefile builds them with the mpif90 localmap.pc names)
#
# MPIFC (mpif90) must provide mpi_f08. FORTRAN=0 skips the bindings; FORTRAN=auto (default) builds
# them when $(MPIFC) is found, and otherwise says so. FFLAGS is appended to ours.
# A program: mpif90 prog.f90 -I$(INCLUDEDIR) -L$(LIBDIR) -llocalmap_fortran -llocalmap
# (localmap.mod is compiler-specific: use the Fortran compiler the module was built with.)
# The top Makefile sets it (mpif90.mpich for MPI=mpich); this default serves an include alone.
MPIFC     ?= mpif90
FORTRAN   ?= auto
F_BUILD   := $(BUILD)/fortran
F_MODDIR  := $(F_BUILD)/include
F_OBJ     := $(F_BUILD)/obj/localmap.o
F_LIB     := $(F_BUILD)/lib/liblocalmap_fortran.a
F_SRC     := bindings/fortran/localmap.f90
F_INC     := $(wildcard bindings/fortran/*.inc)
F_TESTS   := $(patsubst bindings/fortran/tests/%.f90,$(F_BUILD)/%,$(wildcard bindings/fortran/tests/*.f90))
F_EXAMPLES := $(patsubst bindings/fortran/examples/%.f90,$(F_BUILD)/%,$(wildcard bindings/fortran/examples/*.f90))
F_FLAGS   := -std=f2018 -fPIC $(OPT) -g -Wall -Wextra -Wno-unused-dummy-argument -Wno-compare-reals \
             $(if $(filter 1,$(WERROR)),-Werror) $(SAN) $(FFLAGS)
ifeq ($(FORTRAN),0)
F_FOUND   :=
else
F_FOUND   := $(shell command -v $(MPIFC) 2>/dev/null)
endif

.PHONY: fortran install-fortran uninstall-fortran
all: fortran
install: install-fortran
uninstall: uninstall-fortran

ifneq ($(F_FOUND),)
fortran: $(F_LIB) $(F_TESTS) $(F_EXAMPLES) $(F_BUILD)/layout_c

$(F_OBJ): $(F_SRC) $(F_INC) $(BUILD)/.stamp-prog | $(DEPS_FIRST)
	@mkdir -p $(@D) $(F_MODDIR)
	$(MPIFC) $(F_FLAGS) -Ibindings/fortran -J$(F_MODDIR) -c -o $@ $<

$(F_LIB): $(F_OBJ)
	@mkdir -p $(@D)
	rm -f $@
	$(AR) rcs $@ $<

$(F_BUILD)/%: bindings/fortran/tests/%.f90 $(F_LIB) $(SHLIB_DEV)
	@mkdir -p $(F_BUILD)/obj
	$(MPIFC) $(F_FLAGS) -I$(F_MODDIR) -J$(F_BUILD)/obj -o $@ $< $(F_LIB) $(LINK_SHARED) $(LDFLAGS)

$(F_BUILD)/%: bindings/fortran/examples/%.f90 $(F_LIB) $(SHLIB_DEV)
	@mkdir -p $(F_BUILD)/obj
	$(MPIFC) $(F_FLAGS) -I$(F_MODDIR) -J$(F_BUILD)/obj -o $@ $< $(F_LIB) $(LINK_SHARED) $(LDFLAGS)

$(F_BUILD)/layout_c: bindings/fortran/tests/layout.c include/localmap.h
	@mkdir -p $(@D)
	$(MPICC) -std=gnu11 -Iinclude -o $@ $<

install-fortran: $(F_LIB)
	$(INSTALL) -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(DOCDIR)/examples/fortran
	$(INSTALL) -m 644 $(F_LIB) $(DESTDIR)$(LIBDIR)/
	$(INSTALL) -m 644 $(F_MODDIR)/localmap.mod $(DESTDIR)$(INCLUDEDIR)/
	$(INSTALL) -m 644 $(wildcard bindings/fortran/examples/*.f90) $(DESTDIR)$(DOCDIR)/examples/fortran/
else
fortran:
	@echo "fortran: $(if $(filter 0,$(FORTRAN)),FORTRAN=0,$(MPIFC) not found): the Fortran bindings are not built"
install-fortran:
endif

uninstall-fortran:
	rm -f $(DESTDIR)$(LIBDIR)/liblocalmap_fortran.a $(DESTDIR)$(INCLUDEDIR)/localmap.mod \
	      $(addprefix $(DESTDIR)$(DOCDIR)/examples/fortran/,$(notdir $(wildcard bindings/fortran/examples/*.f90)))
	-rmdir $(DESTDIR)$(DOCDIR)/examples/fortran 2>/dev/null
