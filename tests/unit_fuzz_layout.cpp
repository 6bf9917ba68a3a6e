// SPDX-License-Identifier: BSD-3-Clause
// fuzz/fuzz_layout.cpp replayed in the normal suite (see tests/fuzz_replay.h).
#include "../fuzz/fuzz_layout.cpp"
#include "fuzz_replay.h"

int main() { return replay_main("fuzz_layout", 20000); }
