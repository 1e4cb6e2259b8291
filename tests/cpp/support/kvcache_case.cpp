#include "kvcache_case.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "naive_lowp.h"

namespace fa_test {

std::string KVConfig::name() const {
  std::ostringstream s;
  s << flashattn::dtype_name(dtype) << "_d" << head_dim << "_h" << heads << "x" << heads_k << "_b" << batch << "_q"
    << seqlen_q << "_cap" << capacity;
  if (page_size) s << "_page" << page_size;
  if (seqlen_new) s << "_new" << seqlen_new;
  if (scalar_seqlens) s << "_scalarlen";
  if (batch_idx) s << "_batchidx";
  if (leftpad) s << "_leftpad";
  if (rotary_dim) s << "_rot" << rotary_dim << (rotary_interleaved ? "i" : "n");
  if (causal) s << "_causal";
  if (window_left >= 0 || window_right >= 0) s << "_win" << window_left << "_" << window_right;
  if (alibi) s << "_alibi";
  if (softcap > 0) s << "_softcap";
  if (num_splits) s << "_splits" << num_splits;
  return s.str();
}

KVInputs make_kv_inputs(const KVConfig& c, uint64_t seed) {
  if (int64_t(c.cache_seqlens.size()) != c.batch) throw std::runtime_error("KVConfig: cache_seqlens size != batch");
  if (c.page_size && c.capacity % c.page_size) throw std::runtime_error("KVConfig: capacity % page_size != 0");
  KVInputs in;
  in.cfg = c;
  std::mt19937_64 rng(seed);
  const int64_t B = c.batch, H = c.heads, Hk = c.heads_k, D = c.head_dim;
  in.q = HostTensor(c.dtype, {B, c.seqlen_q, H, D});
  in.q.fill_normal(rng);
  if (c.page_size) {
    const int64_t max_blocks = c.capacity / c.page_size, num_blocks = B * max_blocks + 3;
    in.k_cache = HostTensor(c.dtype, {num_blocks, c.page_size, Hk, D});
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(size_t(B * max_blocks));
    in.block_table = i32_tensor(ids, {B, max_blocks});
  } else {
    const int64_t rows = c.batch_idx ? B + 2 : B;
    in.k_cache = HostTensor(c.dtype, {rows, c.capacity, Hk, D});
    if (c.batch_idx) {
      std::vector<int32_t> perm(static_cast<size_t>(rows));
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      perm.resize(size_t(B));
      in.cache_batch_idx = i32_tensor(perm);
    }
  }
  in.v_cache = HostTensor(c.dtype, in.k_cache.shape());
  in.k_cache.fill_normal(rng);
  in.v_cache.fill_normal(rng);
  std::vector<int32_t> lens(c.cache_seqlens.begin(), c.cache_seqlens.end());
  if (c.scalar_seqlens) std::fill(lens.begin(), lens.end(), lens[0]);
  if (!c.scalar_seqlens) in.cache_seqlens = i32_tensor(lens);
  if (c.leftpad) {
    std::vector<int32_t> pads;
    for (int32_t len : lens) pads.push_back(int32_t(rng() % uint64_t(len + 1)));
    in.cache_leftpad = i32_tensor(pads);
  }
  if (c.seqlen_new) {
    in.k_new = HostTensor(c.dtype, {B, c.seqlen_new, Hk, D});
    in.v_new = HostTensor(c.dtype, {B, c.seqlen_new, Hk, D});
    in.k_new.fill_normal(rng);
    in.v_new.fill_normal(rng);
  }
  if (c.rotary_dim) {
    const int64_t half = c.rotary_dim / 2;
    in.rotary_cos = HostTensor(c.dtype, {c.capacity, half});
    in.rotary_sin = HostTensor(c.dtype, {c.capacity, half});
    std::uniform_real_distribution<double> freq(0.001, 1.0);
    std::vector<double> f(static_cast<size_t>(half));
    for (double& x : f) x = freq(rng);
    for (int64_t pos = 0; pos < c.capacity; ++pos)
      for (int64_t i = 0; i < half; ++i) {
        in.rotary_cos.set(pos * half + i, std::cos(double(pos) * f[size_t(i)]));
        in.rotary_sin.set(pos * half + i, std::sin(double(pos) * f[size_t(i)]));
      }
  }
  if (c.alibi) {
    in.alibi = HostTensor(DType::f32, {H});
    in.alibi.fill_uniform(rng, 0.0, 1.0);
  }
  return in;
}

KVOutputs run_kvcache(const KVInputs& in, const std::string& backend, Device device, flashattn::Stream stream) {
  return run_kvcache_via(in, backend, device,
                         [&](const flashattn::KVCacheParams& p) { flashattn::forward_kvcache(p, stream); });
}

KVOutputs run_kvcache_via(const KVInputs& in, const std::string& backend, Device device,
                          const std::function<void(const flashattn::KVCacheParams&)>& call) {
  const KVConfig& c = in.cfg;
  DeviceTensor q(in.q, device), kc(in.k_cache, device), vc(in.v_cache, device), kn(in.k_new, device),
      vn(in.v_new, device), cos(in.rotary_cos, device), sin(in.rotary_sin, device), alibi(in.alibi, device),
      lens(in.cache_seqlens, device), bidx(in.cache_batch_idx, device), pad(in.cache_leftpad, device),
      table(in.block_table, device), kd(in.k_descale, device), vd(in.v_descale, device);
  HostTensor out(c.dtype, in.q.shape()), lse(DType::f32, {c.batch, c.heads, c.seqlen_q});
  out.poison();
  lse.poison();
  DeviceTensor d_out(out, device), d_lse(lse, device);
  flashattn::KVCacheParams p;
  p.q = q.view();
  p.k_cache = kc.view();
  p.v_cache = vc.view();
  p.k_new = kn.view();
  p.v_new = vn.view();
  p.out = d_out.view();
  p.softmax_lse = d_lse.view();
  p.cache_seqlens = lens.view();
  if (c.scalar_seqlens) p.cache_seqlens_scalar = c.cache_seqlens[0];
  p.cache_batch_idx = bidx.view();
  p.cache_leftpad = pad.view();
  p.block_table = table.view();
  p.rotary_cos = cos.view();
  p.rotary_sin = sin.view();
  p.rotary_interleaved = c.rotary_interleaved;
  p.options.causal = c.causal;
  p.options.window_left = c.window_left;
  p.options.window_right = c.window_right;
  p.options.alibi_slopes = alibi.view();
  p.options.softcap = c.softcap;
  p.options.backend = backend;
  p.num_splits = c.num_splits;
  p.k_descale = kd.view();
  p.v_descale = vd.view();
  call(p);
  return KVOutputs{d_out.download(), d_lse.download(), kc.download(), vc.download()};
}

namespace {

// Element offset of (sequence b, position pos, kv head hk, dim 0) in a test cache.
int64_t cache_elem(const KVInputs& in, int64_t b, int64_t pos, int64_t hk) {
  const KVConfig& c = in.cfg;
  const int64_t D = c.head_dim, Hk = c.heads_k;
  if (c.page_size) {
    const int64_t max_blocks = c.capacity / c.page_size;
    const int64_t block = in.block_table.i32()[b * max_blocks + pos / c.page_size];
    return ((block * c.page_size + pos % c.page_size) * Hk + hk) * D;
  }
  const int64_t row = c.batch_idx ? in.cache_batch_idx.i32()[b] : b;
  return ((row * c.capacity + pos) * Hk + hk) * D;
}

}  // namespace

KVOracle kv_oracle(const KVInputs& in) {
  const KVConfig& c = in.cfg;
  KVOracle o;
  o.appended = run_kvcache(in, "cpu_reference", Device::cpu());
  const int64_t B = c.batch, H = c.heads, Hk = c.heads_k, D = c.head_dim, Sq = c.seqlen_q;

  AttnConfig ac;
  ac.dtype = DType::f32;
  ac.heads = H;
  ac.heads_k = Hk;
  ac.head_dim = D;
  ac.causal = c.causal;
  ac.window_left = c.window_left;
  ac.window_right = c.window_right;
  ac.softcap = c.softcap;
  ac.alibi = c.alibi;
  std::vector<int64_t> before(static_cast<size_t>(B)), pad(size_t(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    before[size_t(b)] = c.scalar_seqlens ? c.cache_seqlens[0] : c.cache_seqlens[size_t(b)];
    if (c.leftpad) pad[size_t(b)] = in.cache_leftpad.i32()[b];
    ac.varlen_q.push_back(Sq);
    ac.varlen_k.push_back(before[size_t(b)] + c.seqlen_new - pad[size_t(b)]);
  }
  AttnInputs exact = make_inputs(ac, 0);
  exact.alibi = in.alibi;
  // Queries rotated in fp64 at the positions of common/kvcache.h.
  const bool consecutive = c.causal || c.window_left >= 0 || c.window_right >= 0;
  std::vector<double> q = in.q.to_double();
  if (c.rotary_dim) {
    const int64_t half = c.rotary_dim / 2;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t pos = before[size_t(b)] + (consecutive ? i : 0);
        for (int64_t h = 0; h < H; ++h) {
          double* x = &q[size_t(((b * Sq + i) * H + h) * D)];
          for (int64_t r = 0; r < half; ++r) {
            const double cs = in.rotary_cos.get(pos * half + r), sn = in.rotary_sin.get(pos * half + r);
            const int64_t i0 = c.rotary_interleaved ? 2 * r : r, i1 = c.rotary_interleaved ? 2 * r + 1 : r + half;
            const double x0 = x[i0], x1 = x[i1];
            x[i0] = x0 * cs - x1 * sn;
            x[i1] = x0 * sn + x1 * cs;
          }
        }
      }
  }
  for (size_t i = 0; i < q.size(); ++i) exact.q.set(int64_t(i), q[i]);
  int64_t row = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < ac.varlen_k[size_t(b)]; ++j, ++row)
      for (int64_t hk = 0; hk < Hk; ++hk) {
        const int64_t src = cache_elem(in, b, pad[size_t(b)] + j, hk), dst = (row * Hk + hk) * D;
        for (int64_t d = 0; d < D; ++d) {
          exact.k.set(dst + d, o.appended.k_cache.get(src + d));
          exact.v.set(dst + d, o.appended.v_cache.get(src + d));
        }
      }
  const FwdOutputs ref = reference_forward(exact);
  AttnInputs low = exact;
  low.cfg.dtype = c.dtype;
  low.q = exact.q.as(c.dtype);
  low.k = exact.k.as(c.dtype);
  low.v = exact.v.as(c.dtype);
  const NaiveOutputs naive = naive_lowp(low, false);
  o.out = ref.out.to_double();
  o.naive_out = naive.out;
  // varlen LSE is (H, total_q); the KV-cache LSE is (B, H, Sq)
  const std::vector<double> lse = ref.lse.to_double();
  o.lse.resize(size_t(B * H * Sq));
  o.naive_lse.resize(o.lse.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Sq; ++i) {
        o.lse[size_t((b * H + h) * Sq + i)] = lse[size_t(h * B * Sq + b * Sq + i)];
        o.naive_lse[size_t((b * H + h) * Sq + i)] = naive.lse[size_t(h * B * Sq + b * Sq + i)];
      }
  return o;
}

std::vector<KVConfig> kvcache_cases() {
  std::vector<KVConfig> out;
  auto add = [&](KVConfig c) { out.push_back(c); };
  KVConfig base;
  base.cache_seqlens = {40, 0, 77};
  // plain decode, each dtype and a few head dims
  for (DType dt : {DType::f32, DType::f16, DType::bf16})
    for (int64_t d : {64, 128}) {
      KVConfig c = base;
      c.dtype = dt;
      c.head_dim = d;
      add(c);
    }
  for (int64_t d : {8, 40, 96, 256}) {
    KVConfig c = base;
    c.head_dim = d;
    c.seqlen_q = 3;
    c.causal = true;
    add(c);
  }
  // multi-token queries, causal within the new tokens, appends
  for (int64_t sq : {1, 4, 16}) {
    KVConfig c = base;
    c.seqlen_q = sq;
    c.seqlen_new = sq;
    c.causal = true;
    c.cache_seqlens = {40, 0, 70};
    add(c);
  }
  // paged caches of several page sizes (1, odd, 16, whole), with appends
  for (int64_t page : {1, 3, 16, 96}) {
    KVConfig c = base;
    c.page_size = page;
    c.seqlen_new = 2;
    c.seqlen_q = 2;
    c.causal = page != 16;
    c.cache_seqlens = {40, 0, 77};
    add(c);
  }
  // cache_batch_idx, leftpad, scalar lengths
  {
    KVConfig c = base;
    c.batch_idx = true;
    c.seqlen_new = 1;
    c.cache_seqlens = {10, 0, 50};
    add(c);
    c.leftpad = true;
    add(c);
    c.batch_idx = false;
    c.page_size = 8;
    add(c);
    KVConfig s = base;
    s.scalar_seqlens = true;
    s.cache_seqlens = {30, 30, 30};
    add(s);
  }
  // rotary both styles, with and without causal, partial rotary dim
  for (bool inter : {true, false})
    for (int64_t rd : {64, 32}) {
      KVConfig c = base;
      c.seqlen_new = 3;
      c.seqlen_q = 3;
      c.cache_seqlens = {5, 0, 60};
      c.rotary_dim = rd;
      c.rotary_interleaved = inter;
      c.causal = rd == 64;
      add(c);
    }
  // windows, ALiBi, softcap, GQA ratios, MQA
  {
    KVConfig c = base;
    c.window_left = 16;
    c.window_right = 0;
    c.seqlen_q = 4;
    add(c);
    c.window_left = -1;
    c.alibi = true;
    c.softcap = 20.0f;
    add(c);
    for (int64_t hk : {8, 1}) {
      KVConfig g = base;
      g.heads_k = hk;
      g.seqlen_q = 2;
      add(g);
    }
  }
  // head dims that are not multiples of 8: decode, appends into contiguous and paged caches, rotary over
  // part of an odd head and over all of an even one
  for (int64_t d : {1, 5, 59, 111, 255}) {
    KVConfig c = base;
    c.head_dim = d;
    c.dtype = d == 111 ? DType::bf16 : DType::f16;
    c.seqlen_q = 2;
    c.seqlen_new = 2;
    c.causal = true;
    c.page_size = d == 59 ? 16 : 0;
    c.rotary_dim = d >= 59 ? (d == 111 ? 32 : d - 1) : 0;
    c.rotary_interleaved = d != 255;
    add(c);
  }
  // explicit split counts (a hint CPU backends may ignore) and a longer context
  for (int splits : {1, 3}) {
    KVConfig c = base;
    c.num_splits = splits;
    c.capacity = 600;
    c.cache_seqlens = {512, 1, 333};
    c.seqlen_new = 1;
    add(c);
  }
  return out;
}

}  // namespace fa_test
