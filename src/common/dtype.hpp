// SPDX-License-Identifier: BSD-3-Clause
// Data types localmap supports (DLPack codes; bool as {LM_DL_BOOL, 8, 1}).
#pragma once

#include <cstddef>
#include <string>

#include "localmap.h"

namespace lm {

enum class DType { F16, BF16, F32, F64, I8, I16, I32, I64, U8, BOOL, C64, C128 };

// Maps a DLDataType to DType; throws LM_ERR_INVALID_ARGUMENT (naming `what`) when unsupported.
DType dtype_from_dl(DLDataType t, const char *what);
bool dtype_supported(DLDataType t);
// Bytes of one element of t. Inline: the device component (src/device/) includes this header but
// links no core code (tools/check-layers.py), and uses it too.
inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::I8: case DType::U8: case DType::BOOL: return 1;
    case DType::F16: case DType::BF16: case DType::I16: return 2;
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: case DType::C64: return 8;
    case DType::C128: return 16;
  }
  return 0;
}
const char *dtype_name(DType t);
std::string dl_dtype_name(DLDataType t);
inline bool dtype_equal(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace lm
