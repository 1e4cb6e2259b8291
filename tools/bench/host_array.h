#pragma once

// Host-side tensors of the bench: a flat array in a storage dtype, random inputs, and the inputs of one
// config (generated once on the host, then copied to whichever device a backend runs on).

#include <cstdint>
#include <vector>

#include "config.h"

namespace fabench {

class HostArray {
 public:
  HostArray() = default;
  HostArray(DType dtype, int64_t numel);

  bool present() const { return numel_ > 0; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }

  float get(int64_t i) const;  // upcast to f32 (exact for every storage dtype)

  // N(0, 1) draws rounded to the dtype. Chunks of the array use generators seeded from (seed, chunk), so
  // the values depend on `seed` only, not on the thread count.
  void fill_random(uint64_t seed);

 private:
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_;
};

// Dense inputs of one config: q, dout (B, Sq, H, D); k, v (B, Sk, Hk, D). dout only with a backward.
struct HostInputs {
  HostArray q, k, v, dout;
};

HostInputs make_inputs(const BenchConfig& c, uint64_t seed);

}  // namespace fabench
