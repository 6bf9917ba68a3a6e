# SPDX-License-Identifier: BSD-3-Clause
# The Rust bindings (included by the top Makefile). `make rust` builds both crates and their
# tests and examples with cargo (offline, no third-party crates) into $(BUILD)/rust-target;
# tests/script_rust.sh (run by make check) also runs them. CARGO: the cargo program. liblocalmap
# is linked statically (localmap-sys's default), dynamically in sanitizer builds.
CARGO ?= $(or $(shell command -v cargo 2>/dev/null),$(wildcard $(HOME)/.cargo/bin/cargo))

.PHONY: rust
rust: lib
	@if [ -z "$(CARGO)" ]; then echo "rust: cargo not found: the Rust bindings are not built"; else \
	  cd bindings/rust && CARGO_TARGET_DIR=$(ABS_BUILD)/rust-target LOCALMAP_LIB_DIR=$(ABS_BUILD)/lib \
	  $(if $(filter 1,$(ASAN) $(UBSAN)),LOCALMAP_LINK=dynamic) \
	  LOCALMAP_INCLUDE_DIR=$(CURDIR)/include $(CARGO) build --offline --all-targets; fi
