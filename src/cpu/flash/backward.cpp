// backward(): FlashAttention-2's backward on the CPU, race-free and deterministic, in one of two schedules.
//
//  * fused (enough (sequence, kv head) jobs to occupy every thread twice): one thread owns a job; it
//    packs the job's query blocks once, then for each K/V tile accumulates dK/dV over all query blocks
//    while also accumulating dQ of every block into fp32 tiles of its own. Five GEMMs per pair.
//  * split (few jobs, e.g. one long sequence of an MQA model): the query blocks of all jobs are packed
//    once into a shared buffer; pass A runs over (job, K/V tile) and accumulates dK/dV, pass B over
//    (job, query block) and accumulates dQ, recomputing S and dP (seven GEMMs per pair, no atomics).
//
// Both visit the K/V tiles of a query block and the query blocks of a K/V tile in the same order with
// the same tile grid, so they produce bitwise identical gradients, independent of the thread count.
// Scratch is O(seqlen): every job being processed keeps its query blocks packed in fp32 (about four
// copies of its query rows) and, fused, its dQ; there are at most about twice as many of them as threads.

#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/flash/backward_tile.h"
#include "cpu/flash/convert_tile.h"
#include "cpu/flash/entry.h"
#include "cpu/flash/scratch.h"

namespace flashattn::detail::cpu_flash::FLASH_ISA {

namespace {

struct Job {
  AttnSeq s;
  SeqRange range;
  int64_t blocks = 0;   // query blocks
  int64_t k_tiles = 0;  // K/V tiles
};

std::vector<Job> make_jobs(const BwdProblem& p, const AttnCall& c, TileShape t) {
  std::vector<Job> jobs;
  for (int64_t b = 0; b < p.batch; ++b) {
    const SeqRange r = seq_range(p, b);
    for (int64_t hk = 0; hk < p.heads_k; ++hk) {
      Job j;
      j.range = r;
      j.s.b = b;
      j.s.hk = hk;
      j.s.sq = r.sq;
      j.s.sk = r.sk;
      j.s.keys.k = p.k.ptr;
      j.s.keys.v = p.v.ptr;
      j.s.keys.k_start = p.k.offset(b, r.k_start, hk);
      j.s.keys.v_start = p.v.offset(b, r.k_start, hk);
      j.s.keys.k_row_stride = p.k.row_stride;
      j.s.keys.v_row_stride = p.v.row_stride;
      j.blocks = (j.s.rows(c) + t.q_rows - 1) / t.q_rows;
      j.k_tiles = (r.sk + t.k_rows - 1) / t.k_rows;
      jobs.push_back(j);
    }
  }
  return jobs;
}

// Row j of a head_dim-in-lanes strip tile (strip stride ss) to storage elements [off, off + head_dim).
template <DType DT>
void store_strip_row(const float* tile, int64_t ss, int64_t j, int64_t dim, void* base, int64_t off) {
  for (int64_t t = 0; t < strips_of(dim); ++t)
    store_n<DT>(base, off + t * kLanes, load(tile + t * ss + j * kLanes),
                int(std::min<int64_t>(kLanes, dim - t * kLanes)));
}

void store_dkdv(const AttnCall& c, const BwdProblem& p, const Job& job, TileShape t, int64_t j0, int64_t bc,
                const PairScratch& w) {
  dispatch_dtype(c.dtype, [&](auto dt) {
    constexpr DType DT = decltype(dt)::value;
    for (int64_t j = 0; j < bc; ++j) {
      const int64_t row = job.range.k_start + j0 + j;
      store_strip_row<DT>(w.dk, t.k_rows * kLanes, j, c.head_dim, p.dk.ptr, p.dk.offset(job.s.b, row, job.s.hk));
      store_strip_row<DT>(w.dv, t.k_rows * kLanes, j, c.head_dim, p.dv.ptr, p.dv.offset(job.s.b, row, job.s.hk));
    }
  });
}

void store_dq(const AttnCall& c, const BwdProblem& p, const Job& job, const QueryBlock& blk, const float* dq) {
  dispatch_dtype(c.dtype, [&](auto dt) {
    for (int64_t l = 0; l < blk.lanes.n; ++l) {
      const int64_t r = blk.r0 + l, i = r / c.group, h = job.s.hk * c.group + r % c.group;
      store_strip_row<decltype(dt)::value>(dq, blk.lanes.strips * kLanes * kLanes, l, c.head_dim, p.dq.ptr,
                                           p.dq.offset(job.s.b, job.range.q_start + i, h));
    }
  });
}

void zero_kv_grads(const AttnCall& c, TileShape t, const PairScratch& w) {
  const int64_t n = t.k_rows * strips_of(c.head_dim) * kLanes;
  std::fill(w.dk, w.dk + n, 0.0f);
  std::fill(w.dv, w.dv + n, 0.0f);
}

// dK/dV of K/V tile `tile` of `job` over the given query blocks (in order), stored to dk/dv.
void kv_tile_gradients(const AttnCall& c, const BwdProblem& p, const Job& job, TileShape t, int64_t tile,
                       const QueryBlock* blocks, float* const* dq_tiles, const PairScratch& w) {
  const int64_t j0 = tile * t.k_rows, bc = std::min(t.k_rows, job.s.sk - j0);
  load_kv_tile(c, job.s, t, j0, bc, w);
  zero_kv_grads(c, t, w);
  for (int64_t k = 0; k < job.blocks; ++k)
    if (pair_visible(blocks[k], j0, bc))
      backward_pair(c, t, blocks[k], j0, bc, w, true, dq_tiles ? dq_tiles[k] : nullptr);
  store_dkdv(c, p, job, t, j0, bc, w);
}

void pack_blocks(const AttnCall& c, const BwdProblem& p, const Job& job, TileShape t, int64_t first, int64_t count,
                 QueryBlock* blocks, float* row) {
  const int64_t R = job.s.rows(c);
  for (int64_t k = first; k < first + count; ++k)
    pack_query_block(c, p, job.range, job.s, k * t.q_rows, std::min(R, (k + 1) * t.q_rows), blocks[k], row);
}

void run_fused(const AttnCall& c, const BwdProblem& p, const std::vector<Job>& jobs, TileShape t) {
  int64_t max_blocks = 0;
  for (const Job& j : jobs) max_blocks = std::max(max_blocks, j.blocks);
  const int64_t pair_floats = pair_scratch_floats(c, t), block_floats = query_block_floats(c, t);
  const int64_t dq_floats = t.q_rows * strips_of(c.head_dim) * kLanes;
  const ThreadArenas arenas(pair_floats + max_blocks * (block_floats + dq_floats));
  // Per thread: views of its arena's query blocks and dQ tiles (allocated here, not inside OpenMP).
  const size_t threads = size_t(omp_get_max_threads());
  std::vector<QueryBlock> blocks(threads * size_t(max_blocks));
  std::vector<float*> dq(threads * size_t(max_blocks));
  std::vector<int64_t> order(jobs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = int64_t(k);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return jobs[size_t(a)].blocks * jobs[size_t(a)].k_tiles > jobs[size_t(b)].blocks * jobs[size_t(b)].k_tiles;
  });

#pragma omp parallel
  {
    float* mem = arenas.mine();
    const PairScratch w = carve_pair_scratch(c, t, mem);
    QueryBlock* my_blocks = blocks.data() + size_t(omp_get_thread_num()) * size_t(max_blocks);
    float** my_dq = dq.data() + size_t(omp_get_thread_num()) * size_t(max_blocks);
    for (int64_t k = 0; k < max_blocks; ++k) {
      my_blocks[k] = carve_query_block(c, t, mem + pair_floats + k * block_floats);
      my_dq[k] = mem + pair_floats + max_blocks * block_floats + k * dq_floats;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < int64_t(jobs.size()); ++n) {
      const Job& job = jobs[size_t(order[size_t(n)])];
      pack_blocks(c, p, job, t, 0, job.blocks, my_blocks, w.row);
      for (int64_t k = 0; k < job.blocks; ++k) std::fill(my_dq[k], my_dq[k] + dq_floats, 0.0f);
      for (int64_t tile = 0; tile < job.k_tiles; ++tile) kv_tile_gradients(c, p, job, t, tile, my_blocks, my_dq, w);
      for (int64_t k = 0; k < job.blocks; ++k) store_dq(c, p, job, my_blocks[k], my_dq[k]);
    }
  }
}

void run_split(const AttnCall& c, const BwdProblem& p, const std::vector<Job>& jobs, TileShape t) {
  const int64_t block_floats = query_block_floats(c, t);
  const int64_t dq_floats = t.q_rows * strips_of(c.head_dim) * kLanes;
  const int64_t pair_floats = pair_scratch_floats(c, t);
  // Work lists: (job, query block) and (job, K/V tile); first_block[j] indexes the shared block buffer.
  std::vector<int64_t> first_block(jobs.size() + 1, 0);
  std::vector<std::pair<int64_t, int64_t>> block_items, tile_items;
  for (size_t j = 0; j < jobs.size(); ++j) {
    first_block[j + 1] = first_block[j] + jobs[j].blocks;
    for (int64_t k = 0; k < jobs[j].blocks; ++k) block_items.emplace_back(int64_t(j), k);
    for (int64_t k = 0; k < jobs[j].k_tiles; ++k) tile_items.emplace_back(int64_t(j), k);
  }
  std::unique_ptr<float, FreeDeleter> shared(static_cast<float*>(
      std::aligned_alloc(64, size_t(std::max<int64_t>(first_block.back() * block_floats, kLanes)) * sizeof(float))));
  if (!shared) throw std::bad_alloc();
  std::vector<QueryBlock> blocks(size_t(first_block.back()));
  for (size_t k = 0; k < blocks.size(); ++k)
    blocks[k] = carve_query_block(c, t, shared.get() + int64_t(k) * block_floats);
  const ThreadArenas arenas(pair_floats + dq_floats);

#pragma omp parallel
  {
    float* mem = arenas.mine();
    const PairScratch w = carve_pair_scratch(c, t, mem);
    float* dq = mem + pair_floats;
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < int64_t(block_items.size()); ++n) {
      const auto [j, k] = block_items[size_t(n)];
      pack_blocks(c, p, jobs[size_t(j)], t, k, 1, blocks.data() + first_block[size_t(j)], w.row);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < int64_t(tile_items.size()); ++n) {
      const auto [j, tile] = tile_items[size_t(n)];
      kv_tile_gradients(c, p, jobs[size_t(j)], t, tile, blocks.data() + first_block[size_t(j)], nullptr, w);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t n = 0; n < int64_t(block_items.size()); ++n) {
      const auto [j, k] = block_items[size_t(n)];
      const Job& job = jobs[size_t(j)];
      const QueryBlock& blk = blocks[size_t(first_block[size_t(j)] + k)];
      std::fill(dq, dq + dq_floats, 0.0f);
      for (int64_t tile = 0; tile < job.k_tiles; ++tile) {
        const int64_t j0 = tile * t.k_rows, bc = std::min(t.k_rows, job.s.sk - j0);
        if (!pair_visible(blk, j0, bc)) continue;
        load_kv_tile(c, job.s, t, j0, bc, w);
        backward_pair(c, t, blk, j0, bc, w, false, dq);
      }
      store_dq(c, p, job, blk, dq);
    }
  }
}

}  // namespace

void backward(const BwdProblem& p, Stream) {
  const AttnCall c = make_call(p.dtype, p.heads, p.heads_k, p.head_dim, p.score, p.dropout);
  const TileShape t = backward_tiles();
  const std::vector<Job> jobs = make_jobs(p, c, t);
  if (int64_t(jobs.size()) >= 2 * int64_t(omp_get_max_threads()))
    run_fused(c, p, jobs, t);
  else
    run_split(c, p, jobs, t);
}

}  // namespace flashattn::detail::cpu_flash::FLASH_ISA
