// SPDX-License-Identifier: BSD-3-Clause
// fuzz/fuzz_planner.cpp replayed in the normal suite (see tests/fuzz_replay.h).
#include "../fuzz/fuzz_planner.cpp"
#include "fuzz_replay.h"

int main() { return replay_main("fuzz_planner", 3000); }
