#include "api/backends.h"

namespace flashattn::detail {

const std::vector<Backend>& registry() {
  // Fastest first within each device; the CPU reference is last everywhere: it is the oracle, not a
  // production path, and is chosen only when nothing else supports a call.
  static const std::vector<Backend> backends = {
#if defined(FLASHATTN_WITH_CUDA)
    cuda_sm90_backend(),  // ahead of cuda_sm80, which it leaves the calls it declines or defers
    cuda_sm80_backend(),
    cuda_decode_backend(),
    // Volta's tensor cores; opt-in until run on a GPU. After cuda_decode, which declines everything on a
    // Volta GPU, so that no KV-cache call on a later one pays for asking it.
    cuda_sm70_backend(),
    cuda_fp8_backend(),  // FP8 forward through bf16 copies, until a native FP8 kernel
    cuda_fa2_simt_backend(),
    cuda_fa1_simt_backend(),
    cuda_naive_backend(),
#endif
    cpu_flash_backend(),
    cpu_reference_backend(),
  };
  return backends;
}

}  // namespace flashattn::detail
