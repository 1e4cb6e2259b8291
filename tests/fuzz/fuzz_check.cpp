#include "fuzz_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fa_fuzz {

namespace {
const FuzzCall* g_current = nullptr;
}  // namespace

void set_current_call(const FuzzCall* call) { g_current = call; }

void fail(const char* what, const char* detail) {
  std::fprintf(stderr, "flashattn fuzz check failed: %s: %s\n", what, detail);
  if (g_current) std::fprintf(stderr, "call: %s", describe(*g_current).c_str());
  std::abort();
}

void check_rejected(const FuzzCall& before, const FuzzCall& after, int status) {
  const std::string msg = flashattn_last_error();
  if (status != FLASHATTN_INVALID_ARGUMENT && status != FLASHATTN_UNSUPPORTED)
    fail(("unexpected status " + std::to_string(status)).c_str(), msg.c_str());
  if (msg.rfind("flashattn", 0) != 0) fail("rejection message does not start with 'flashattn'", msg.c_str());
  for (int s = 0; s < kSlots; ++s)
    if (!after.tensors[s].same_bytes(before.tensors[s])) fail("a rejected call wrote to", slot_name(s));
}

void check_writes_in_views(const FuzzCall& before, const FuzzCall& after) {
  for (int s = 0; s < kSlots; ++s) {
    const bool ok = after.writes(s) ? after.tensors[s].outside_view_unchanged(before.tensors[s])
                                    : after.tensors[s].same_bytes(before.tensors[s]);
    if (!ok) fail(after.writes(s) ? "wrote outside the view of" : "modified the input", slot_name(s));
  }
}

namespace {

constexpr double kEps32 = 0x1p-24;

double unit_roundoff(int32_t dtype) {
  switch (dtype) {
    case FLASHATTN_F16:
      return 0x1p-11;
    case FLASHATTN_BF16:
      return 0x1p-8;
    case FLASHATTN_FP8_E4M3:
      return 0x1p-4;
    default:
      return kEps32;
  }
}

double max_finite(int32_t dtype) {
  switch (dtype) {
    case FLASHATTN_F16:
      return 65504.0;
    case FLASHATTN_BF16:
      return 3.3895313892515355e38;
    default:
      return 3.4028234663852886e38;
  }
}

double max_abs(const FuzzTensor& t) {
  double m = 0;
  if (!t.addressable()) return m;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) m = std::max(m, std::fabs(t.get(i)));
  return m;
}

// The longest sequence of accepted cu_seqlens (max_seqlen is only an upper bound).
int64_t longest(const FuzzTensor& cu) {
  int64_t m = 0;
  for (int64_t i = 1; i < cu.numel(); ++i) m = std::max<int64_t>(m, int64_t(cu.get_i32(i)) - cu.get_i32(i - 1));
  return m;
}

int64_t dim(const FuzzTensor& t, int d) { return t.present() && d < t.view().ndim ? t.view().shape[d] : 0; }

// Magnitudes that bound each output and its rounding error. With L the largest |logit| the inputs allow,
// fp32 logits are off by about eps32 * L; a softmax turns an absolute logit error delta into a relative
// error of about delta in the probabilities, which then scales every output. With rotary, q and the
// appended keys are rotated in the storage dtype (flash-attn's semantics: the rotated copies are stored),
// which the fp64 oracle does not round: that adds up to 2 u L to the logit error (delta), u the cache's
// (an FP8 cache's rounding after a rotation computed at different precisions may differ by one e4m3 step).
// FP8 inputs are exact values: only the bf16 output is rounded.
struct Bounds {
  double u = kEps32, u_cache = kEps32, delta = 0, drop = 1;
  double q = 0, k = 0, v = 0, dout = 0, scale = 1;
  double keys = 0, rows = 0, dim = 0;
};

Bounds bounds_of(const FuzzCall& c) {
  Bounds b;
  const FuzzTensor& q = c.tensors[kQ];
  const bool kv = c.op == Op::kvcache;
  const flashattn_options& o = kv ? c.kv.options : c.bwd.fwd.options;
  b.u = q.view().dtype == FLASHATTN_FP8_E4M3 ? unit_roundoff(FLASHATTN_BF16) : unit_roundoff(q.view().dtype);
  b.u_cache = kv ? unit_roundoff(c.tensors[kKCache].view().dtype) : b.u;
  b.dim = double(dim(q, q.view().ndim - 1));
  b.scale = o.has_softmax_scale ? std::fabs(double(o.softmax_scale)) : 1.0 / std::sqrt(std::max(b.dim, 1.0));
  b.q = max_abs(q);
  b.k = std::max(max_abs(c.tensors[kv ? kKCache : kK]), max_abs(c.tensors[kKNew]));
  b.v = std::max(max_abs(c.tensors[kv ? kVCache : kV]), max_abs(c.tensors[kVNew]));
  b.dout = max_abs(c.tensors[kDout]);
  const double group = double(std::max<int64_t>(dim(q, q.view().ndim - 2), 1));
  if (kv) {
    const double capacity = c.tensors[kBlockTable].present()
                                ? double(dim(c.tensors[kBlockTable], 1) * dim(c.tensors[kKCache], 1))
                                : double(dim(c.tensors[kKCache], 1));
    b.keys = capacity + double(dim(c.tensors[kKNew], 1));
    b.rows = double(dim(q, 1)) * group;
    if (c.tensors[kRotaryCos].present())  // rotated q and k: |cos|, |sin| <= 2 in the fuzzer's tables
      b.q *= 4, b.k *= 4;
  } else if (c.tensors[kCuQ].present()) {
    b.keys = double(longest(c.tensors[kCuK]));
    b.rows = double(longest(c.tensors[kCuQ])) * group;
  } else {
    b.keys = double(dim(c.tensors[kK], 1));
    b.rows = double(dim(q, 1)) * group;
  }
  const double logit = b.scale * b.q * b.k * b.dim + max_abs(c.tensors[kAlibi]) * (b.keys + b.rows);
  b.delta = 16 * kEps32 * (logit + 1);
  if (kv && c.tensors[kRotaryCos].present()) b.delta += 2 * b.u_cache * b.scale * b.q * b.k * b.dim;
  const float p = kv ? 0.0f : c.bwd.fwd.dropout_p;
  b.drop = p > 0 ? 1.0 / (1.0 - double(p)) : 1.0;
  return b;
}

// Largest allowed |flash - reference| for the output in `slot`.
double tolerance(const Bounds& b, int slot) {
  const double fp32_sums = 4 * kEps32 * (b.keys + b.rows + b.dim);
  const double rel = 8 * b.u + 8 * b.delta + fp32_sums;
  switch (slot) {
    case kOut:
      return b.v * b.drop * rel;
    case kLse:
      return 4 * b.delta + 8 * kEps32 * std::log(b.keys + 2);
    case kDv:
      return b.rows * b.dout * b.drop * rel;
    case kDq:
      return b.scale * b.k * 2 * b.dim * b.dout * b.v * b.drop * rel;
    case kDk:
      return b.scale * b.q * 2 * b.dim * b.dout * b.v * b.drop * b.rows * rel;
    case kKCache:  // plus e4m3's subnormal step, coarser than 2 u |k| below 2^-6
      return b.k * (2 * b.u_cache + 8 * kEps32) + (b.u_cache == 0x1p-4 ? 0x1p-9 : 0.0);
    case kVCache:
      return b.v * (2 * b.u_cache + 8 * kEps32);
    default:
      return 0;
  }
}

void compare_slot(const FuzzCall& call, int slot, const FuzzTensor& got, const FuzzTensor& ref, double tol) {
  if (!got.addressable()) return;
  const double big = max_finite(got.view().dtype) / 2;
  for (int64_t i = 0, n = got.numel(); i < n; ++i) {
    const double g = got.get(i), r = ref.get(i);
    bool ok;
    if (std::isnan(g) || std::isnan(r))
      ok = false;  // inputs are finite: NaN is an unwritten (poisoned) element or a bug
    else if (std::isinf(g) || std::isinf(r))
      ok = g == r || std::fabs(std::isinf(g) ? r : g) > big;  // equal infinities, or both at the overflow edge
    else
      ok = std::fabs(g - r) <= tol;
    if (!ok) {
      char detail[256];
      std::snprintf(detail, sizeof(detail), "%s[%lld]: cpu_flash %.9g, cpu_reference %.9g, tolerance %.3g (op %d)",
                    slot_name(slot), static_cast<long long>(i), g, r, tol, int(call.op));
      fail("cpu_flash differs from cpu_reference", detail);
    }
  }
}

}  // namespace

void check_matches_reference(const FuzzCall& call, const FuzzCall& flash, const FuzzCall& reference) {
  const Bounds b = bounds_of(call);
  // tolerance() is a first-order bound: it holds while the fp32 logit error delta is small. Past delta = 1
  // (logits beyond ~1e6, e.g. softmax_scale 1e4 on inputs of magnitude 200) a probability recomputed in fp32
  // can be off by a factor e^delta, and overflow, in any fp32 implementation, flash-attn's included; such
  // calls are ill-conditioned, and only the outputs that do not go through the softmax are compared.
  const bool conditioned = b.delta <= 1;
  for (int s = 0; s < kSlots; ++s) {
    const bool through_softmax = s != kKCache && s != kVCache;
    if (call.writes(s) && (conditioned || !through_softmax))
      compare_slot(call, s, flash.tensors[s], reference.tensors[s], tolerance(b, s));
  }
}

}  // namespace fa_fuzz
