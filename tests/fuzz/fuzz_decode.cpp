// Decoding the fuzzer's bytes into a call. Every choice reads one byte (or four for seeds); byte 0 is the
// plain valid choice, so the fuzzer grows unusual calls from valid ones. Shapes stay small but cross the
// cpu_flash tile and path boundaries (8 packed rows: decode vs tiles; 32/64 keys per block/tile; 96 query
// rows per backward block; 1024 keys before decode splits the keys).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "fuzz_call.h"

namespace fa_fuzz {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kCostCap = int64_t(1) << 50;

const int32_t kDtypes[] = {FLASHATTN_F32,
                           FLASHATTN_F16,
                           FLASHATTN_BF16,
                           FLASHATTN_F32,
                           FLASHATTN_F16,
                           FLASHATTN_BF16,
                           FLASHATTN_FP8_E4M3,
                           FLASHATTN_I32,
                           9,
                           -1};
const int64_t kBatches[] = {1, 2, 3, 0};
const int64_t kSeqQ[] = {1, 2, 3, 5, 8, 9, 16, 17, 0, 4, 31, 47, 48, 49, 97, 100};
const int64_t kSeqK[] = {1, 3, 7, 16, 33, 64, 65, 0, 2, 31, 129, 200, 1030, 5, 63, 17};
const int64_t kHeadsK[] = {1, 2, 1, 3, 4, 17};
const int64_t kGroups[] = {1, 2, 1, 4, 3, 8};
const int64_t kHeadDims[] = {8, 16, 32, 64, 24, 40, 128, 256, 72, 0, 12, 264};
const int32_t kWindows[] = {-1, 0, 1, 2, 3, 5, 8, 16, 40, -2, 1000, std::numeric_limits<int32_t>::max()};
const float kSoftcaps[] = {0, 0, 0, 0, 0.5f, 30, 1e-3f, 1e6f, -1, kNaN, kInf, 5};
const float kScales[] = {0, 0, 0, 0, 1e4f, 1e-6f, 0, -1, kNaN, kInf, 0.3f, 100};  // entries 0-3: default scale
const float kDropouts[] = {0, 0, 0, 0, 0, 0.1f, 0.5f, 0.999f, 1.0f, -0.1f, kNaN, 0.3f};
const Fill kFills[] = {Fill::normal, Fill::normal, Fill::large, Fill::tiny, Fill::sparse};

int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(std::max<int64_t>(a, 0), std::max<int64_t>(b, 0), &r) || r > kCostCap) return kCostCap;
  return r;
}

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) || r > kCostCap ? kCostCap : r;
}

// Strides for a logical shape: row-major over an order of the dims chosen by the input (as a transposed
// framework tensor would have), each dim optionally padded.
flashattn_tensor layout(ByteReader& r, int32_t dtype, const std::vector<int64_t>& shape) {
  flashattn_tensor t{};
  t.dtype = dtype;
  t.device_type = FLASHATTN_CPU;
  t.ndim = int32_t(shape.size());
  std::vector<int> order(shape.size());  // memory order, innermost last
  for (size_t d = 0; d < shape.size(); ++d) order[d] = int(d);
  const int64_t how = r.below(4), n = int64_t(shape.size());
  if (how == 1 && n >= 3) std::swap(order[size_t(n - 3)], order[size_t(n - 2)]);  // (B, H, S, D) in memory
  if (how == 2 && n >= 2) std::reverse(order.begin(), order.end() - 1);           // outer dims reversed
  const bool padded = r.below(4) == 3;
  int64_t running = 1;
  for (int64_t k = n - 1; k >= 0; --k) {
    const int d = order[size_t(k)];
    t.shape[d] = shape[size_t(d)];
    t.stride[d] = running;
    running = running * std::max<int64_t>(shape[size_t(d)], 1) + (padded ? r.below(7) : 0);
  }
  return t;
}

// A tensor argument: a layout, then at most one defect chosen by the input.
FuzzTensor tensor(ByteReader& r, int32_t dtype, const std::vector<int64_t>& shape) {
  flashattn_tensor t = layout(r, dtype, shape);
  bool misalign = false, null_data = false;
  const uint8_t m = r.byte();
  if (m >= 232) {
    const int d = t.ndim > 0 ? int(r.below(t.ndim)) : 0;
    switch (m - 232) {
      case 0:
        return FuzzTensor();  // absent
      case 1:
        null_data = true;
        break;
      case 2:
        t.ndim = std::max(0, t.ndim - 1);
        break;
      case 3:
        if (t.ndim < 4) t.shape[t.ndim] = 1, t.stride[t.ndim] = 1;
        t.ndim += 1;
        break;
      case 4:
        t.dtype = (t.dtype + 1) % 5;
        break;
      case 5:
        t.dtype = 9;
        break;
      case 6:
        t.device_type = FLASHATTN_CUDA;
        break;
      case 7:
        t.shape[d] += 1;
        break;
      case 8:
        t.shape[d] -= 1;
        break;
      case 9:
        t.shape[d] = -3;
        break;
      case 10:
        t.stride[d] = -t.stride[d];
        break;
      case 11:
        t.stride[d] = (int64_t(1) << 62) + r.byte();
        break;
      case 12:
        t.stride[d] = 0;
        break;
      case 13:
        t.stride[t.ndim - 1] = 2;
        break;
      case 14:
        misalign = true;
        break;
      case 15:
        t.shape[d] = int64_t(1) << 62;
        break;
      case 16:
        t.shape[d] = 0;
        break;
      case 17:
        t.ndim = -1;
        break;
      case 18:
        t.device_index = 1;
        break;
      case 19:
        t.stride[d] -= 1;
        break;
      case 20:
        t.shape[d] = std::numeric_limits<int64_t>::max();
        break;
      default:
        break;
    }
  }
  return FuzzTensor(t, misalign, null_data);
}

FuzzTensor filled(ByteReader& r, int32_t dtype, const std::vector<int64_t>& shape, Fill fill, uint64_t seed) {
  FuzzTensor t = tensor(r, dtype, shape);
  t.fill(fill, seed);
  return t;
}

void set_i32_values(FuzzTensor& t, const std::vector<int32_t>& values) {
  if (!t.addressable() || t.view().dtype != FLASHATTN_I32) return;
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), int64_t(values.size())); ++i) t.set_i32(i, values[size_t(i)]);
}

struct Dims {
  int32_t dtype = FLASHATTN_F32;
  int64_t batch = 1, heads = 1, heads_k = 1, head_dim = 8;
};

Dims decode_dims(ByteReader& r) {
  Dims d;
  d.dtype = r.pick(kDtypes);
  d.batch = r.pick(kBatches);
  d.heads_k = r.pick(kHeadsK);
  d.heads = d.heads_k * r.pick(kGroups) + (r.rare(16) ? 1 : 0);
  d.head_dim = r.pick(kHeadDims);
  return d;
}

// Options shared by every entry point; ALiBi slopes go to the kAlibi slot.
void decode_options(ByteReader& r, const Dims& d, flashattn_options& o, FuzzCall& call) {
  o.causal = r.byte() & 1;
  o.window_left = r.pick(kWindows);
  o.window_right = r.pick(kWindows);
  o.softcap = r.pick(kSoftcaps);
  const int64_t scale = r.below(int64_t(std::size(kScales)));
  o.has_softmax_scale = scale >= 4;
  o.softmax_scale = kScales[scale];
  const int64_t alibi = r.below(8);
  if (alibi >= 5) {
    std::vector<int64_t> shape = alibi == 6 ? std::vector<int64_t>{d.batch, d.heads} : std::vector<int64_t>{d.heads};
    if (alibi == 7) shape[0] += 1;
    call.tensors[kAlibi] = filled(r, FLASHATTN_F32, shape, Fill::normal, r.u32());
  }
}

// cu_seqlens of the given lengths, then maybe one broken invariant.
void decode_cu_seqlens(ByteReader& r, const std::vector<int64_t>& lens_q, const std::vector<int64_t>& lens_k,
                       FuzzCall& call, int64_t* total_q, int64_t* total_k) {
  std::vector<int32_t> cq{0}, ck{0};
  for (size_t b = 0; b < lens_q.size(); ++b) {
    cq.push_back(cq.back() + int32_t(lens_q[b]));
    ck.push_back(ck.back() + int32_t(lens_k[b]));
  }
  *total_q = cq.back();
  *total_k = ck.back();
  const int64_t max_q = *std::max_element(lens_q.begin(), lens_q.end()) + r.below(2);
  const int64_t max_k = *std::max_element(lens_k.begin(), lens_k.end()) + r.below(2);
  call.bwd.fwd.max_seqlen_q = max_q;
  call.bwd.fwd.max_seqlen_k = max_k;
  switch (r.rare(4) ? r.below(8) : -1) {
    case 0:
      cq[0] = 1;
      break;
    case 1:
      ck.back() += 1;
      break;
    case 2:
      cq[cq.size() / 2] = cq.back() + 1;
      break;
    case 3:
      call.bwd.fwd.max_seqlen_q = std::max<int64_t>(max_q - 1, 0);
      break;
    case 4:
      call.bwd.fwd.max_seqlen_k = -1;
      break;
    case 5:
      ck.push_back(ck.back());
      break;
    case 6:
      call.bwd.fwd.max_seqlen_q = std::numeric_limits<int64_t>::max();
      break;  // a loose bound is valid
    case 7:
      call.bwd.fwd.max_seqlen_k = std::numeric_limits<int64_t>::max();
      break;
    default:
      break;
  }
  call.tensors[kCuQ] = tensor(r, FLASHATTN_I32, {int64_t(cq.size())});
  call.tensors[kCuK] = tensor(r, FLASHATTN_I32, {int64_t(ck.size())});
  set_i32_values(call.tensors[kCuQ], cq);
  set_i32_values(call.tensors[kCuK], ck);
}

int64_t dim_of(const FuzzCall& c, int slot, int d) {
  const flashattn_tensor& v = c.tensors[slot].view();
  return c.tensors[slot].present() && d < v.ndim ? std::max<int64_t>(v.shape[d], 0) : 1;
}

void decode_attention(ByteReader& r, FuzzCall& call) {
  const Dims d = decode_dims(r);
  const bool varlen = r.below(4) == 3;
  const Fill fill = r.pick(kFills);
  const uint32_t seed = r.u32();
  std::vector<int64_t> q_shape, k_shape, lse_shape;
  int64_t sk_max;
  if (varlen) {
    std::vector<int64_t> lens_q, lens_k;
    for (int64_t b = 0; b < std::max<int64_t>(d.batch, 1); ++b) {
      lens_q.push_back(r.pick(kSeqQ));
      lens_k.push_back(r.pick(kSeqK));
    }
    if (d.batch == 0) lens_q = {0}, lens_k = {0};
    int64_t total_q, total_k;
    if (d.batch == 0) {
      call.tensors[kCuQ] = tensor(r, FLASHATTN_I32, {1});
      call.tensors[kCuK] = tensor(r, FLASHATTN_I32, {1});
      set_i32_values(call.tensors[kCuQ], {0});
      set_i32_values(call.tensors[kCuK], {0});
      total_q = total_k = 0;
    } else {
      decode_cu_seqlens(r, lens_q, lens_k, call, &total_q, &total_k);
    }
    q_shape = {total_q, d.heads, d.head_dim};
    k_shape = {total_k, d.heads_k, d.head_dim};
    lse_shape = {d.heads, total_q};
    sk_max = *std::max_element(lens_k.begin(), lens_k.end());
  } else {
    const int64_t sq = r.pick(kSeqQ), sk = r.pick(kSeqK);
    q_shape = {d.batch, sq, d.heads, d.head_dim};
    k_shape = {d.batch, sk, d.heads_k, d.head_dim};
    lse_shape = {d.batch, d.heads, sq};
    sk_max = sk;
  }
  call.tensors[kQ] = filled(r, d.dtype, q_shape, fill, seed + 1);
  call.tensors[kK] = filled(r, d.dtype, k_shape, fill, seed + 2);
  call.tensors[kV] = filled(r, d.dtype, k_shape, fill, seed + 3);
  call.tensors[kOut] = tensor(r, d.dtype, q_shape);
  if (call.op == Op::backward || r.below(4) != 3) call.tensors[kLse] = tensor(r, FLASHATTN_F32, lse_shape);
  decode_options(r, d, call.bwd.fwd.options, call);
  call.bwd.fwd.dropout_p = r.pick(kDropouts);
  call.bwd.fwd.seed = r.u32();
  call.bwd.fwd.offset = r.u32();
  if (call.op == Op::backward) {
    call.tensors[kDout] = filled(r, d.dtype, q_shape, fill == Fill::large ? Fill::normal : fill, seed + 4);
    call.tensors[kDq] = tensor(r, d.dtype, q_shape);
    call.tensors[kDk] = tensor(r, d.dtype, k_shape);
    call.tensors[kDv] = tensor(r, d.dtype, k_shape);
    call.bwd.deterministic = r.byte() & 1;
  }
  for (int s : {kOut, kLse, kDq, kDk, kDv}) call.tensors[s].fill(Fill::poison, 0);
  // Rows x keys x head dim, from the views as given (a huge size there makes the call validation-only).
  int64_t rows = sat_mul(sat_mul(dim_of(call, kQ, 0), dim_of(call, kQ, 1)), dim_of(call, kQ, 2));
  if (!varlen) rows = sat_mul(rows, dim_of(call, kQ, 3));
  const int64_t keys = varlen ? std::max<int64_t>(sk_max, 0) : dim_of(call, kK, 1);
  call.cost = sat_mul(sat_mul(rows, sat_add(keys, 1)), call.op == Op::backward ? 3 : 1);
}

void decode_kvcache(ByteReader& r, FuzzCall& call) {
  const Dims d = decode_dims(r);
  const Fill fill = r.pick(kFills);
  const uint32_t seed = r.u32();
  const int64_t sq = r.pick(kSeqQ) % 18;
  const int64_t new_tokens[] = {0, 1, 2, 5};
  const int64_t sn = r.pick(new_tokens);
  const bool paged = r.below(3) == 2;
  const int64_t B = d.batch, Hk = d.heads_k, D = d.head_dim;
  int64_t capacity, cache_rows = B;
  if (paged) {
    const int64_t pages[] = {1, 2, 3, 4, 5, 8, 16, 7};
    const int64_t block_counts[] = {4, 1, 2, 8, 12, 0, 3};
    const int64_t page = r.pick(pages), max_blocks = 1 + r.below(4), blocks = r.pick(block_counts);
    capacity = page * max_blocks;
    call.tensors[kKCache] = filled(r, d.dtype, {blocks, page, Hk, D}, fill, seed + 5);
    call.tensors[kVCache] = filled(r, d.dtype, {blocks, page, Hk, D}, fill, seed + 6);
    call.tensors[kBlockTable] = tensor(r, FLASHATTN_I32, {B, max_blocks});
    std::vector<int32_t> table;
    const int64_t how = r.below(4);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < max_blocks; ++i) {
        const int64_t n = std::max<int64_t>(blocks, 1);
        const int64_t v = how == 0   ? (b * max_blocks + i) % n
                          : how == 1 ? r.below(n)
                          : how == 2 ? (n - 1 - (b * max_blocks + i) % n)
                                     : r.below(n + 4) - 2;
        table.push_back(int32_t(v));
      }
    set_i32_values(call.tensors[kBlockTable], table);
  } else {
    const int64_t lengths[] = {8, 1, 3, 16, 33, 64, 0, 100, 1030, 2};
    capacity = r.pick(lengths);
    cache_rows = B + r.below(2) - (r.rare(16) ? 1 : 0);
    // Filling and comparing two caches of 4 rows x 1030 positions x 17 heads x 256 dims took 15-70 s under
    // the sanitizers (a libFuzzer timeout): long caches come with few heads or small head dims.
    constexpr int64_t kMaxCacheElems = int64_t(1) << 19;
    capacity = std::min(capacity, std::max<int64_t>(kMaxCacheElems / std::max<int64_t>(cache_rows * Hk * D, 1), 1));
    call.tensors[kKCache] = filled(r, d.dtype, {cache_rows, capacity, Hk, D}, fill, seed + 5);
    call.tensors[kVCache] = filled(r, d.dtype, {cache_rows, capacity, Hk, D}, fill, seed + 6);
  }
  // Lengths before the append: in range unless the input asks for garbage.
  const int64_t room = std::max<int64_t>(capacity - sn, 0);
  std::vector<int32_t> lens;
  const int64_t lens_how = r.below(4);
  for (int64_t b = 0; b < B; ++b)
    lens.push_back(int32_t(lens_how == 3 ? r.below(capacity + 5) - 2 : r.below(room + 1)));
  if (lens_how == 0 || lens_how == 3) {
    call.tensors[kCacheSeqlens] = tensor(r, FLASHATTN_I32, {B});
    set_i32_values(call.tensors[kCacheSeqlens], lens);
  } else {
    const int64_t scalars[] = {
        -1, -1, -2, capacity + 1, std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
    call.kv.cache_seqlens_scalar = lens_how == 1 && !lens.empty() ? lens[0] : r.pick(scalars);
    if (call.kv.cache_seqlens_scalar >= 0) lens.assign(size_t(B), int32_t(call.kv.cache_seqlens_scalar));
    if (call.kv.cache_seqlens_scalar == -1) lens.assign(size_t(B), int32_t(capacity - sn));
  }
  if (r.rare(4)) {
    std::vector<int32_t> pads;
    for (int64_t b = 0; b < B; ++b) pads.push_back(int32_t(r.below(std::max<int32_t>(lens[size_t(b)], 0) + 1)));
    if (r.rare(8) && !pads.empty()) pads[0] = -1;
    call.tensors[kLeftpad] = tensor(r, FLASHATTN_I32, {B});
    set_i32_values(call.tensors[kLeftpad], pads);
  }
  if ((!paged && r.rare(4)) || r.rare(32)) {
    std::vector<int32_t> rows;
    const int64_t how = r.below(3), shift = r.byte();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = std::max<int64_t>(cache_rows, 1);
      rows.push_back(int32_t(how == 0 ? (b + shift) % n : how == 1 ? r.below(n) : r.below(n + 4) - 2));
    }
    call.tensors[kBatchIdx] = tensor(r, FLASHATTN_I32, {B});
    set_i32_values(call.tensors[kBatchIdx], rows);
  }
  if (sn > 0) {
    call.tensors[kKNew] = filled(r, d.dtype, {B, sn, Hk, D}, fill, seed + 7);
    call.tensors[kVNew] = filled(r, d.dtype, {B, sn, Hk, D}, fill, seed + 8);
  }
  if (r.rare(4)) {
    const int64_t half = 1 + r.below(std::max<int64_t>(D / 2, 1)), rows = capacity + r.below(2) - (r.rare(16) ? 1 : 0);
    call.tensors[kRotaryCos] = filled(r, d.dtype, {rows, half}, Fill::normal, seed + 9);
    call.tensors[kRotarySin] = filled(r, d.dtype, {rows, half}, Fill::normal, seed + 10);
    call.kv.rotary_interleaved = r.byte() & 1;
  }
  call.tensors[kQ] = filled(r, d.dtype, {B, sq, d.heads, D}, fill, seed + 1);
  call.tensors[kOut] = tensor(r, d.dtype, {B, sq, d.heads, D});
  if (r.below(4) != 3) call.tensors[kLse] = tensor(r, FLASHATTN_F32, {B, d.heads, sq});
  for (int s : {kOut, kLse}) call.tensors[s].fill(Fill::poison, 0);
  decode_options(r, d, call.kv.options, call);
  const int splits[] = {0, 1, 2, 4, -1, 64};
  call.kv.num_splits = r.pick(splits);

  const int64_t cap_view =
      paged ? sat_mul(dim_of(call, kBlockTable, 1), dim_of(call, kKCache, 1)) : dim_of(call, kKCache, 1);
  int64_t rows = 1;
  for (int k = 0; k < 4; ++k) rows = sat_mul(rows, dim_of(call, kQ, k));
  call.cost = sat_mul(rows, sat_add(sat_add(cap_view, dim_of(call, kKNew, 1)), 1));
  // The checks compare both whole caches with the other backend's element by element, whatever the
  // attention costs: a call with no query rows but 18M-element caches took 70 s under the sanitizers.
  call.cost = sat_add(call.cost, sat_add(call.tensors[kKCache].numel(), call.tensors[kVCache].numel()));
}

}  // namespace

FuzzCall decode_call(ByteReader& r) {
  FuzzCall call;
  call.op = Op(r.below(3));
  flashattn_bwd_params_init(&call.bwd);
  flashattn_kvcache_params_init(&call.kv);
  const int64_t backend = r.below(16);
  call.backend = backend < 6 ? "cpu_flash" : backend < 10 ? "cpu_reference" : backend < 15 ? "" : "no_such_backend";
  call.backend_null = backend >= 13 && backend < 15;
  if (call.op == Op::kvcache)
    decode_kvcache(r, call);
  else
    decode_attention(r, call);
  return call;
}

}  // namespace fa_fuzz
