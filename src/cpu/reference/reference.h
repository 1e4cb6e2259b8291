#pragma once

// cpu_reference: materialised attention with fp64 accumulation. The oracle of every test.

#include "api/problem.h"
#include "common/score.h"
#include "cpu/reference/head_math.h"
#include "flashattn/params.h"

namespace flashattn::detail::reference {

void forward(const FwdProblem& p, Stream stream);
void backward(const BwdProblem& p, Stream stream);
void forward_kvcache(const KVCacheProblem& p, Stream stream);

DropoutMask make_dropout(const DropoutParams& d, int64_t b, int64_t h, int64_t heads);
ScoreMod<double> make_mod(const ScoreParams& s, int64_t b, int64_t h);

}  // namespace flashattn::detail::reference
