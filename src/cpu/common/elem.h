#pragma once

// Scalar element access by runtime dtype for the CPU backends (the reference reads every element
// through these; the tiled backend converts whole rows with convert_row).

#include <cstdint>

#include "common/convert.h"
#include "flashattn/tensor.h"

namespace flashattn::detail {

inline float load_float(const void* base, int64_t offset, DType dt) {
  switch (dt) {
    case DType::f32:
      return static_cast<const float*>(base)[offset];
    case DType::f16:
      return f16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::bf16:
      return bf16_to_float(static_cast<const uint16_t*>(base)[offset]);
    case DType::fp8_e4m3:
      return e4m3_to_float(static_cast<const uint8_t*>(base)[offset]);
    default:
      return 0.0f;  // validation admits only the float types
  }
}

inline void store_float(void* base, int64_t offset, DType dt, float value) {
  switch (dt) {
    case DType::f32:
      static_cast<float*>(base)[offset] = value;
      break;
    case DType::f16:
      static_cast<uint16_t*>(base)[offset] = float_to_f16(value);
      break;
    case DType::bf16:
      static_cast<uint16_t*>(base)[offset] = float_to_bf16(value);
      break;
    case DType::fp8_e4m3:
      static_cast<uint8_t*>(base)[offset] = float_to_e4m3(value);
      break;
    default:
      break;
  }
}

// Round a value to the precision of `dt` (identity for f32).
inline float round_to(DType dt, float value) {
  switch (dt) {
    case DType::f16:
      return f16_to_float(float_to_f16(value));
    case DType::bf16:
      return bf16_to_float(float_to_bf16(value));
    case DType::fp8_e4m3:
      return e4m3_to_float(float_to_e4m3(value));
    default:
      return value;
  }
}

}  // namespace flashattn::detail
