#include <string>

#include "api/backends.h"
#include "cpu/flash/flash.h"

namespace flashattn::detail {

namespace {

// Validation already restricts calls to what cpu_flash implements (f32/f16/bf16, any head dim up to 256,
// every mask, modifier, dropout and layout; fp8_e4m3 inputs or caches with their descale factors, forward
// only); these checks keep the promise explicit should validation ever admit more. Any head dim works
// natively: rows are loaded and stored with masked partial strips (convert_tile.h) and the fp32 tiles are
// zero beyond head_dim, so the GEMMs need no padding copy.
std::string check_common(DType dtype, int64_t head_dim, bool fp8_ok) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16 && !(fp8_ok && dtype == DType::fp8_e4m3))
    return std::string("dtype ") + dtype_name(dtype) + " not supported (f32, f16, bf16" +
           (fp8_ok ? ", fp8_e4m3)" : ")");
  if (head_dim <= 0 || head_dim > 256) return "head_dim " + std::to_string(head_dim) + " not supported (1 to 256)";
  return {};
}

std::string supports_fwd(const FwdProblem& p) { return check_common(p.dtype, p.head_dim, true); }
std::string supports_bwd(const BwdProblem& p) { return check_common(p.dtype, p.head_dim, false); }
std::string supports_kvcache(const KVCacheProblem& p) {
  if (p.cache_dtype != p.dtype && p.cache_dtype != DType::fp8_e4m3)
    return std::string("a ") + dtype_name(p.cache_dtype) + " KV cache beside " + dtype_name(p.dtype) + " queries";
  return check_common(p.dtype, p.head_dim, false);
}
std::string isa() { return cpu_flash::active_isa().name; }

}  // namespace

const Backend& cpu_flash_backend() {
  static const Backend b{"cpu_flash",
                         DeviceType::cpu,
                         supports_fwd,
                         cpu_flash::forward,
                         supports_bwd,
                         cpu_flash::backward,
                         supports_kvcache,
                         cpu_flash::forward_kvcache,
                         /*any_head_dim=*/true,
                         /*paged_varlen_fwd=*/true,
                         /*default_decline=*/nullptr,
                         isa};
  return b;
}

}  // namespace flashattn::detail
