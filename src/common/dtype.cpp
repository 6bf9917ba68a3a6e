// SPDX-License-Identifier: BSD-3-Clause
#include "common/dtype.hpp"

#include "common/error.hpp"

namespace lm {

static bool classify(DLDataType t, DType *out) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLFloat:
      if (t.bits == 16) { *out = DType::F16; return true; }
      if (t.bits == 32) { *out = DType::F32; return true; }
      if (t.bits == 64) { *out = DType::F64; return true; }
      return false;
    case kDLBfloat:
      if (t.bits == 16) { *out = DType::BF16; return true; }
      return false;
    case kDLInt:
      if (t.bits == 8) { *out = DType::I8; return true; }
      if (t.bits == 16) { *out = DType::I16; return true; }
      if (t.bits == 32) { *out = DType::I32; return true; }
      if (t.bits == 64) { *out = DType::I64; return true; }
      return false;
    case kDLUInt:
      if (t.bits == 8) { *out = DType::U8; return true; }
      return false;
    case LM_DL_BOOL:
      if (t.bits == 8) { *out = DType::BOOL; return true; }
      return false;
    case kDLComplex:
      if (t.bits == 64) { *out = DType::C64; return true; }
      if (t.bits == 128) { *out = DType::C128; return true; }
      return false;
    default:
      return false;
  }
}

bool dtype_supported(DLDataType t) {
  DType d;
  return classify(t, &d);
}

DType dtype_from_dl(DLDataType t, const char *what) {
  DType d;
  if (!classify(t, &d))
    fail(LM_ERR_INVALID_ARGUMENT,
         "%s: unsupported dtype {code=%u, bits=%u, lanes=%u} (supported: float16, bfloat16, "
         "float32, float64, int8/16/32/64, uint8, bool {code=6,bits=8}, complex64, complex128; "
         "lanes=1)",
         what, t.code, t.bits, t.lanes);
  return d;
}

const char *dtype_name(DType t) {
  switch (t) {
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::I8: return "int8";
    case DType::I16: return "int16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::BOOL: return "bool";
    case DType::C64: return "complex64";
    case DType::C128: return "complex128";
  }
  return "?";
}

std::string dl_dtype_name(DLDataType t) {
  DType d;
  if (classify(t, &d)) return dtype_name(d);
  return strfmt("{code=%u,bits=%u,lanes=%u}", t.code, t.bits, t.lanes);
}

}  // namespace lm
