// The ring's overhead on one GPU: plain flashattn::forward (+ backward) against ring_forward
// (+ ring_backward) over a ring of one rank, with the CUDA LocalCommunicator and (when built) a
// NcclCommunicator of world size one. A world of one takes the ring's direct path (the plain local call
// after the ring's argument checks: docs/distributed.md), so the difference is the cost of entering the
// ring API; before that path it measured the ring's machinery (per-block calls, fp32 merges and
// accumulators), recorded in bench/results/2026-12-02-h200-ring-overhead.md.
//
//   ring_overhead [--seqlens 4096,16384] [--heads 16] [--dim 128] [--batch 1] [--iters 30] [--warmup 5]
//                 [--layouts contiguous,zigzag] [--no-backward] [--backend NAME] [--device 0]
//
// bf16, causal and not. Each configuration runs `warmup` times, then `iters` times back to back on one
// stream, each run between two CUDA events; the table gives the median event time and its overhead over
// the plain call. "max|diff|" is the largest difference of the ring's forward output from the plain
// call's (0 for the contiguous layout, which makes the plain call).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/convert.h"
#include "flashattn/dist.h"
#include "flashattn/flashattn.h"
#if defined(FLASHATTN_WITH_NCCL)
#include "flashattn/dist_nccl.h"
#endif

namespace {

namespace dist = flashattn::dist;
using flashattn::DType;
using flashattn::Tensor;

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "ring_overhead: %s: %s\n", what, cudaGetErrorString(err));
  std::exit(1);
}

struct Options {
  std::vector<int64_t> seqlens{4096, 16384};
  std::vector<dist::ShardLayout> layouts{dist::ShardLayout::contiguous, dist::ShardLayout::zigzag};
  int64_t batch = 1, heads = 16, dim = 128;
  int iters = 30, warmup = 5, device = 0;
  bool backward = true;
  std::string backend;
};

[[noreturn]] void usage(const std::string& what) {
  std::fprintf(stderr,
               "ring_overhead: %s\n"
               "options: --seqlens S1,S2 --heads H --dim D --batch B --iters N --warmup N\n"
               "         --layouts contiguous,zigzag --no-backward --backend NAME --device I\n",
               what.c_str());
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + a);
      return argv[++i];
    };
    if (a == "--seqlens") {
      o.seqlens.clear();
      for (const std::string& s : split(value())) o.seqlens.push_back(std::stoll(s));
    } else if (a == "--layouts") {
      o.layouts.clear();
      for (const std::string& l : split(value())) {
        if (l != "zigzag" && l != "contiguous") usage("--layouts takes zigzag and/or contiguous, got " + l);
        o.layouts.push_back(l == "zigzag" ? dist::ShardLayout::zigzag : dist::ShardLayout::contiguous);
      }
    } else if (a == "--heads") {
      o.heads = std::stoll(value());
    } else if (a == "--dim") {
      o.dim = std::stoll(value());
    } else if (a == "--batch") {
      o.batch = std::stoll(value());
    } else if (a == "--iters") {
      o.iters = std::stoi(value());
    } else if (a == "--warmup") {
      o.warmup = std::stoi(value());
    } else if (a == "--device") {
      o.device = std::stoi(value());
    } else if (a == "--backend") {
      o.backend = value();
    } else if (a == "--no-backward") {
      o.backward = false;
    } else {
      usage("unknown option " + a);
    }
  }
  if (o.iters < 1 || o.warmup < 0) usage("--iters must be >= 1 and --warmup >= 0");
  return o;
}

// A device buffer of `count` elements of `dtype`, filled with N(0, 1) values (bf16) or zeros.
class DeviceArray {
 public:
  DeviceArray(DType dtype, size_t count, std::mt19937_64* rng) : bytes_(count * size_t(flashattn::dtype_size(dtype))) {
    check(cudaMalloc(&data_, bytes_), "cudaMalloc");
    if (!rng) {
      check(cudaMemset(data_, 0, bytes_), "cudaMemset");
      return;
    }
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint16_t> host(count);
    for (uint16_t& h : host) h = flashattn::detail::float_to_bf16(normal(*rng));
    check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* data() const { return data_; }
  std::vector<float> download_bf16() const {
    std::vector<uint16_t> host(bytes_ / 2);
    check(cudaMemcpy(host.data(), data_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy");
    std::vector<float> out(host.size());
    for (size_t i = 0; i < host.size(); ++i) out[i] = flashattn::detail::bf16_to_float(host[i]);
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_;
};

// The tensors of one configuration: q, k, v, dout random; out, lse, dq, dk, dv written by the runs.
struct Problem {
  Problem(const Options& o, int64_t seqlen, bool causal, std::mt19937_64& rng)
      : n(size_t(o.batch * seqlen * o.heads * o.dim)),
        q(DType::bf16, n, &rng),
        k(DType::bf16, n, &rng),
        v(DType::bf16, n, &rng),
        dout(DType::bf16, n, &rng),
        out(DType::bf16, n, nullptr),
        dq(DType::bf16, n, nullptr),
        dk(DType::bf16, n, nullptr),
        dv(DType::bf16, n, nullptr),
        lse(DType::f32, size_t(o.batch * o.heads * seqlen), nullptr) {
    const flashattn::Device dev = flashattn::Device::cuda(o.device);
    auto qkv = [&](const DeviceArray& a) {
      return Tensor::contiguous(a.data(), DType::bf16, {o.batch, seqlen, o.heads, o.dim}, dev);
    };
    p.q = qkv(q);
    p.k = qkv(k);
    p.v = qkv(v);
    p.out = qkv(out);
    p.softmax_lse = Tensor::contiguous(lse.data(), DType::f32, {o.batch, o.heads, seqlen}, dev);
    p.dout = qkv(dout);
    p.dq = qkv(dq);
    p.dk = qkv(dk);
    p.dv = qkv(dv);
    p.options.causal = causal;
    p.options.backend = o.backend;
  }
  size_t n;
  DeviceArray q, k, v, dout, out, dq, dk, dv, lse;
  flashattn::BwdParams p;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Median milliseconds of `run` between CUDA events, runs queued back to back after the warm-up.
double time_ms(const Options& o, cudaStream_t stream, const std::function<void(cudaStream_t)>& run) {
  for (int i = 0; i < o.warmup; ++i) run(stream);
  check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<cudaEvent_t> events(size_t(2 * o.iters));
  for (cudaEvent_t& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
  for (int i = 0; i < o.iters; ++i) {
    check(cudaEventRecord(events[size_t(2 * i)], stream), "cudaEventRecord");
    run(stream);
    check(cudaEventRecord(events[size_t(2 * i + 1)], stream), "cudaEventRecord");
  }
  check(cudaStreamSynchronize(stream), "timed runs");
  std::vector<double> ms;
  for (int i = 0; i < o.iters; ++i) {
    float t = 0.0f;
    check(cudaEventElapsedTime(&t, events[size_t(2 * i)], events[size_t(2 * i + 1)]), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  for (cudaEvent_t e : events) cudaEventDestroy(e);
  return median(ms);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::abs(a[i] - b[i])));
  return m;
}

struct Transport {
  std::string name;
  dist::Communicator* comm;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  check(cudaSetDevice(o.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  dist::LocalCommunicator local(flashattn::Device::cuda(o.device));
  std::vector<Transport> transports{{"local", &local}};
#if defined(FLASHATTN_WITH_NCCL)
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) usage("ncclGetUniqueId failed");
  dist::NcclCommunicator nccl(0, 1, id, flashattn::Device::cuda(o.device));
  transports.push_back({"nccl", &nccl});
#endif

  std::printf("device: %s (cuda:%d); bf16, B=%lld H=%lld D=%lld; median of %d runs after %d warm-up\n", prop.name,
              o.device, (long long)o.batch, (long long)o.heads, (long long)o.dim, o.iters, o.warmup);
  std::printf("%-7s %-7s %-8s %-10s %-11s %10s %12s %9s %10s\n", "seqlen", "causal", "pass", "layout", "transport",
              "plain ms", "ring ms", "overhead", "max|diff|");
  std::mt19937_64 rng(1);
  try {
    for (int64_t seqlen : o.seqlens) {
      for (bool causal : {false, true}) {
        Problem pr(o, seqlen, causal, rng);
        const flashattn::BwdParams& p = pr.p;
        const double fwd_ms = time_ms(o, stream, [&](cudaStream_t s) { flashattn::forward(p, s); });
        const std::vector<float> plain_out = pr.out.download_bf16();
        const double bwd_ms = o.backward ? time_ms(o, stream,
                                                   [&](cudaStream_t s) {
                                                     flashattn::forward(p, s);
                                                     flashattn::backward(p, s);
                                                   })
                                         : 0.0;
        for (dist::ShardLayout layout : o.layouts) {
          dist::ShardSpec spec;
          spec.layout = layout;
          spec.seqlen = seqlen;
          for (const Transport& t : transports) {
            const double ring_fwd =
                time_ms(o, stream, [&](cudaStream_t s) { dist::ring_forward(*t.comm, p, spec, s); });
            const double diff = max_abs_diff(pr.out.download_bf16(), plain_out);
            auto row = [&](const char* pass, double plain, double ring, const std::string& d) {
              std::printf("%-7lld %-7s %-8s %-10s %-11s %10.3f %12.3f %8.2f%% %10s\n", (long long)seqlen,
                          causal ? "yes" : "no", pass, dist::layout_name(layout), t.name.c_str(), plain, ring,
                          100.0 * (ring - plain) / plain, d.c_str());
            };
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.3g", diff);
            row("fwd", fwd_ms, ring_fwd, buf);
            if (!o.backward) continue;
            const double ring_bwd = time_ms(o, stream, [&](cudaStream_t s) {
              dist::ring_forward(*t.comm, p, spec, s);
              dist::ring_backward(*t.comm, p, spec, s);
            });
            row("fwd+bwd", bwd_ms, ring_bwd, "");
          }
        }
      }
    }
  } catch (const flashattn::Error& e) {
    std::fprintf(stderr, "ring_overhead: %s\n", e.what());
    return 1;
  }
  cudaStreamDestroy(stream);
  return 0;
}
