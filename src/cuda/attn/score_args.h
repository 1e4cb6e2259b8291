#pragma once

// The score constants every CUDA attention kernel derives once on the host from the normalised problem
// (no magic numbers or per-thread recomputation on the device), and the choice between a kernel's
// general and feature-free instances. Plain C++.

#include <cstdint>

#include "api/problem.h"
#include "common/philox.h"

namespace flashattn::detail::cuda::attn {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// What the forward and the backward kernels share.
struct ScoreArgs {
  float scale_log2 = 0;  // softmax_scale * log2(e): logits are handled in base 2 (exp2 is one SFU op)
  bool dropout = false;
  uint32_t drop_threshold = 0;  // drop when the Philox word < this (common/philox.h)
  float keep_scale = 1;         // 1 / (1 - p)
  int group = 1;                // query heads per kv head
};

// The call's softmax/dropout constants, computed once on the host.
inline ScoreArgs make_score_args(const FwdProblem& p) {
  ScoreArgs s;
  s.scale_log2 = float(double(p.score.softmax_scale) * 1.4426950408889634);
  s.dropout = p.dropout.p > 0.0f;
  if (s.dropout) {
    s.drop_threshold = dropout_threshold(p.dropout.p);
    s.keep_scale = float(1.0 / (1.0 - double(p.dropout.p)));
  }
  s.group = int(p.group_size());
  return s;
}
// A KV-cache call's (no dropout there).
inline ScoreArgs make_score_args(const KVCacheProblem& p) {
  FwdProblem f;
  f.score = p.score;
  f.heads = p.heads;
  f.heads_k = p.heads_k;
  return make_score_args(f);
}

// Each kernel is compiled twice: a general instance and one without dropout, softcap and ALiBi
// (kGeneral = false), whose element-wise code is a scale, a mask compare and exp2. Most training calls
// use none of the three, and the general code's registers and instructions cost the feature-free call
// up to half its time (bench/NOTES.md). Chosen on the host, per call.
inline bool needs_general_kernel(const FwdProblem& p) {
  return p.dropout.p > 0.0f || p.score.softcap != 0.0f || p.score.alibi_slopes != nullptr;
}
// The feature-free forward also folds the scale into exp2's argument after taking the row maximum of
// the raw dot products, which is only the maximum of the logits when the scale is positive.
inline bool needs_general_fwd(const FwdProblem& p) {
  return needs_general_kernel(p) || !(p.score.softmax_scale > 0.0f);
}

}  // namespace flashattn::detail::cuda::attn
