/* SPDX-License-Identifier: BSD-3-Clause */
/* Replays a libFuzzer target (fuzz/fuzz_*.cpp, #included before this header) in the normal suite,
 * built with the normal compiler: every file of fuzz/corpus/<name>/ (reproducers of findings
 * and seeds), then a fixed-seed stream of pseudo-random inputs. So the targets compile in every
 * build (the planner's API may move under them) and their invariants run in `make check` even
 * where clang's libFuzzer is missing. A violated invariant aborts, failing the test. */
#pragma once

#include <dirent.h>

#include <cstdio>
#include <string>
#include <vector>

static int replay_main(const char *name, int random_inputs) {
  int n = 0;
  std::string dir = std::string("fuzz/corpus/") + name;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string path = dir + "/" + e->d_name;
      std::FILE *f = std::fopen(path.c_str(), "rb");
      if (!f) continue;
      std::vector<uint8_t> buf;
      int c;
      while ((c = std::fgetc(f)) != EOF) buf.push_back(static_cast<uint8_t>(c));
      std::fclose(f);
      LLVMFuzzerTestOneInput(buf.data(), buf.size());
      ++n;
    }
    closedir(d);
  }
  uint64_t x = 0x9e3779b97f4a7c15ull;
  std::vector<uint8_t> buf;
  for (int i = 0; i < random_inputs; ++i) {
    buf.resize(1 + i % 96);
    for (auto &b : buf) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      b = static_cast<uint8_t>(x >> 24);
    }
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    ++n;
  }
  std::printf("%s: %d inputs replayed, every invariant held\n", name, n);
  return 0;
}
