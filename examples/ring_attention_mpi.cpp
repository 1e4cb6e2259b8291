// Context-parallel attention over MPI: each rank holds a shard of one long sequence and runs ring
// attention (or the all-gather mode) on it. Doubles as the CPU scaling benchmark of docs/distributed.md.
//
//   mpirun -np 4 ./ring_attention_mpi --seqlen 16384 --heads 4 --dim 64 --backward --check
//
// Inputs are a pure function of (batch, position, head, channel), so every rank fills its shard without
// the others and any number of ranks sees the same full tensors. --mode single runs the plain
// single-process call on rank 0 (the baseline). --check compares the gathered output with a plain call
// on rank 0 (meant for small sizes).

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "flashattn/dist_mpi.h"
#include "flashattn/flashattn.h"

namespace {

namespace dist = flashattn::dist;
using flashattn::DType;
using flashattn::Tensor;

struct Options {
  int64_t batch = 1, seqlen = 4096, heads = 4, heads_k = 0, dim = 64;  // heads_k 0: = heads
  bool causal = true, backward = false, check = false;
  std::string mode = "ring";  // ring, allgather, single
  dist::ShardLayout layout = dist::ShardLayout::zigzag;
  std::string backend;
  int iters = 3, warmup = 1;
};

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr,
               "ring_attention_mpi: %s\n"
               "options: --batch B --seqlen S --heads H --heads-k Hk --dim D --no-causal --backward\n"
               "         --mode ring|allgather|single --layout zigzag|contiguous --backend NAME\n"
               "         --iters N --warmup N --check\n",
               what);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--batch")
      o.batch = std::stoll(value());
    else if (a == "--seqlen")
      o.seqlen = std::stoll(value());
    else if (a == "--heads")
      o.heads = std::stoll(value());
    else if (a == "--heads-k")
      o.heads_k = std::stoll(value());
    else if (a == "--dim")
      o.dim = std::stoll(value());
    else if (a == "--no-causal")
      o.causal = false;
    else if (a == "--backward")
      o.backward = true;
    else if (a == "--check")
      o.check = true;
    else if (a == "--mode")
      o.mode = value();
    else if (a == "--layout") {
      const std::string l = value();
      if (l != "zigzag" && l != "contiguous") usage("--layout is zigzag or contiguous");
      o.layout = l == "zigzag" ? dist::ShardLayout::zigzag : dist::ShardLayout::contiguous;
    } else if (a == "--backend")
      o.backend = value();
    else if (a == "--iters")
      o.iters = std::stoi(value());
    else if (a == "--warmup")
      o.warmup = std::stoi(value());
    else
      usage(("unknown option " + a).c_str());
  }
  if (o.heads_k == 0) o.heads_k = o.heads;
  if (o.mode != "ring" && o.mode != "allgather" && o.mode != "single") usage("--mode is ring, allgather or single");
  if (o.backward && o.mode == "allgather") usage("the all-gather mode has no backward");
  return o;
}

// A reproducible value in [-1, 1) for element `index` of tensor `which` (SplitMix64).
float input_value(uint64_t which, uint64_t index) {
  uint64_t z = which * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(double(z >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// A bf16 (B, rows, heads, D) tensor whose local row r holds global position positions[r].
struct Bf16 {
  std::vector<uint16_t> data;
  Tensor view;
};

Bf16 make_input(uint64_t which, const Options& o, int64_t heads, const std::vector<int64_t>& positions) {
  const int64_t rows = int64_t(positions.size());
  Bf16 t;
  t.data.resize(size_t(o.batch * rows * heads * o.dim));
  for (int64_t b = 0; b < o.batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < heads * o.dim; ++e) {
        const uint64_t global = uint64_t(((b * o.seqlen + positions[size_t(r)]) * heads) * o.dim + e);
        t.data[size_t((b * rows + r) * heads * o.dim + e)] = to_bf16(input_value(which, global) * 2.0f);
      }
  t.view = Tensor::contiguous(t.data.data(), DType::bf16, {o.batch, rows, heads, o.dim});
  return t;
}

Bf16 empty_like(const Options& o, int64_t rows, int64_t heads) {
  Bf16 t;
  t.data.assign(size_t(o.batch * rows * heads * o.dim), 0);
  t.view = Tensor::contiguous(t.data.data(), DType::bf16, {o.batch, rows, heads, o.dim});
  return t;
}

float bf16_value(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const Options o = parse(argc, argv);
  const bool single = o.mode == "single";
  const int shards = single ? 1 : world;  // single: rank 0 holds everything, the others idle
  const int shard = single ? 0 : rank;

  dist::ShardSpec spec;
  spec.layout = o.layout;
  spec.seqlen = o.seqlen;
  std::vector<int64_t> positions;
  for (const dist::Segment& s : dist::shard_segments(o.seqlen, shards, shard, o.layout))
    for (int64_t p = s.start; p < s.start + s.length; ++p) positions.push_back(p);
  const int64_t rows = int64_t(positions.size());

  const Bf16 q = make_input(1, o, o.heads, positions), k = make_input(2, o, o.heads_k, positions),
             v = make_input(3, o, o.heads_k, positions), dout = make_input(4, o, o.heads, positions);
  Bf16 out = empty_like(o, rows, o.heads), dq = empty_like(o, rows, o.heads), dk = empty_like(o, rows, o.heads_k),
       dv = empty_like(o, rows, o.heads_k);
  std::vector<float> lse(size_t(o.batch * o.heads * rows));

  flashattn::BwdParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.out = out.view;
  p.softmax_lse = Tensor::contiguous(lse.data(), DType::f32, {o.batch, o.heads, rows});
  p.dout = dout.view;
  p.dq = dq.view;
  p.dk = dk.view;
  p.dv = dv.view;
  p.options.causal = o.causal;
  p.options.backend = o.backend;

  dist::MpiCommunicator comm(MPI_COMM_WORLD);
  auto run_forward = [&] {
    if (single) {
      if (rank == 0) flashattn::forward(p);
    } else if (o.mode == "ring") {
      dist::ring_forward(comm, p, spec);
    } else {
      dist::allgather_forward(comm, p, spec);
    }
  };
  auto run_backward = [&] {
    if (single) {
      if (rank == 0) flashattn::backward(p);
    } else {
      dist::ring_backward(comm, p, spec);
    }
  };
  // The wall time of a collective step is that of its slowest rank. The CPU time summed over ranks (all
  // threads, MPI's polling included) is the work it cost: on a shared or oversubscribed machine it shows
  // the ring's overhead better than wall time does.
  struct Timing {
    double wall = 0, cpu = 0;
  };
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  auto timed = [&](auto&& fn) {
    std::vector<double> walls, cpus;
    for (int i = 0; i < o.warmup + o.iters; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = MPI_Wtime(), c0 = cpu_now();
      fn();
      double mine[2] = {MPI_Wtime() - t0, cpu_now() - c0}, slowest = 0, total = 0;
      MPI_Allreduce(&mine[0], &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(&mine[1], &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (i >= o.warmup) {
        walls.push_back(slowest);
        cpus.push_back(total);
      }
    }
    return Timing{median(walls), median(cpus)};
  };

  try {
    const Timing fwd = timed(run_forward);
    const Timing bwd = o.backward ? timed(run_backward) : Timing{};
    const double fwd_flops =
        4.0 * double(o.batch * o.heads) * double(o.seqlen) * double(o.seqlen) * double(o.dim) * (o.causal ? 0.5 : 1.0);
    if (rank == 0) {
      const char* omp = std::getenv("OMP_NUM_THREADS");
      std::printf("mode=%s layout=%s ranks=%d OMP_NUM_THREADS=%s B=%lld S=%lld H=%lld Hk=%lld D=%lld causal=%d\n",
                  o.mode.c_str(), dist::layout_name(o.layout), single ? 1 : world, omp ? omp : "unset",
                  (long long)o.batch, (long long)o.seqlen, (long long)o.heads, (long long)o.heads_k, (long long)o.dim,
                  int(o.causal));
      std::printf("forward  %10.3f ms  %8.2f GFLOP/s  cpu %8.3f s\n", fwd.wall * 1e3, fwd_flops / fwd.wall * 1e-9,
                  fwd.cpu);
      if (o.backward)
        std::printf("backward %10.3f ms  %8.2f GFLOP/s  cpu %8.3f s\n", bwd.wall * 1e3,
                    2.5 * fwd_flops / bwd.wall * 1e-9, bwd.cpu);
    }

    if (o.check && !single) {
      // Gather the distributed output and compare it with a plain call over the whole sequence on rank 0.
      std::vector<int64_t> all_positions(size_t(o.seqlen));
      for (int64_t i = 0; i < o.seqlen; ++i) all_positions[size_t(i)] = i;
      Bf16 full_out = empty_like(o, o.seqlen, o.heads);
      dist::gather_tensor(comm, out.view, full_out.view, 1, spec);
      if (rank == 0) {
        const Bf16 fq = make_input(1, o, o.heads, all_positions), fk = make_input(2, o, o.heads_k, all_positions),
                   fv = make_input(3, o, o.heads_k, all_positions);
        Bf16 ref = empty_like(o, o.seqlen, o.heads);
        flashattn::FwdParams f;
        f.q = fq.view;
        f.k = fk.view;
        f.v = fv.view;
        f.out = ref.view;
        f.options = p.options;
        flashattn::forward(f);
        double max_diff = 0, max_ref = 0;
        for (size_t i = 0; i < ref.data.size(); ++i) {
          max_diff = std::max(max_diff, double(std::fabs(bf16_value(ref.data[i]) - bf16_value(full_out.data[i]))));
          max_ref = std::max(max_ref, double(std::fabs(bf16_value(ref.data[i]))));
        }
        std::printf("check: max |distributed - single| = %.3g (max |out| %.3g)\n", max_diff, max_ref);
      }
    }
  } catch (const flashattn::Error& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
