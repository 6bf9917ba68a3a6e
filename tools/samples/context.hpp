// SPDX-License-Identifier: BSD-3-Clause
// What the documentation's C++ fragments use without declaring it (tools/check-samples.py
// compiles each fragment after this file, inside a function of the lm_local_fn_t signature). A
// fragment's own declarations hide these. A name a new fragment needs goes here.
#include <localmap.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace lm = localmap;

// The program around a fragment.
extern lm::environment &env;
extern lm::mesh m;
extern lm::dist_tensor x, y;
