#include "host_array.h"

#include <algorithm>
#include <random>

#include "cpu/common/elem.h"

namespace fabench {

HostArray::HostArray(DType dtype, int64_t numel)
    : dtype_(dtype), numel_(numel), bytes_(size_t(numel) * size_t(flashattn::dtype_size(dtype))) {}

float HostArray::get(int64_t i) const { return flashattn::detail::load_float(bytes_.data(), i, dtype_); }

void HostArray::fill_random(uint64_t seed) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (numel_ + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(c), uint32_t(c >> 32)};
    std::mt19937_64 rng(seq);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t end = std::min(numel_, (c + 1) * kChunk);
    for (int64_t i = c * kChunk; i < end; ++i) flashattn::detail::store_float(bytes_.data(), i, dtype_, normal(rng));
  }
}

HostInputs make_inputs(const BenchConfig& c, uint64_t seed) {
  const int64_t q_numel = c.batch * c.seqlen_q * c.heads * c.head_dim;
  const int64_t k_numel = c.batch * c.seqlen_k * c.heads_k * c.head_dim;
  HostInputs in;
  in.q = HostArray(c.dtype, q_numel);
  in.k = HostArray(c.dtype, k_numel);
  in.v = HostArray(c.dtype, k_numel);
  in.q.fill_random(seed);
  in.k.fill_random(seed + 1);
  in.v.fill_random(seed + 2);
  if (c.has_backward()) {
    in.dout = HostArray(c.dtype, q_numel);
    in.dout.fill_random(seed + 3);
  }
  return in;
}

}  // namespace fabench
