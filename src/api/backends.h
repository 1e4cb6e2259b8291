#pragma once

// One accessor per backend; registry.cpp lists them in preference order.

#include "api/backend.h"

namespace flashattn::detail {

const Backend& cpu_flash_backend();
const Backend& cpu_reference_backend();

#if defined(FLASHATTN_WITH_CUDA)
const Backend& cuda_sm90_backend();
const Backend& cuda_sm80_backend();
const Backend& cuda_sm70_backend();
const Backend& cuda_decode_backend();
const Backend& cuda_fp8_backend();
const Backend& cuda_naive_backend();
const Backend& cuda_fa1_simt_backend();
const Backend& cuda_fa2_simt_backend();
#endif

}  // namespace flashattn::detail
