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
size_t dtype_size(DType t);
const char *dtype_name(DType t);
std::string dl_dtype_name(DLDataType t);
inline bool dtype_equal(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

}  // namespace lm
