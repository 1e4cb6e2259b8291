#pragma once

// The all-close check of a backend's outputs against the fp64 cpu_reference, with flash-attn's criterion
//   max|got - ref| <= 2 * max|naive - ref| + floor
// where naive is the same math done naively in the storage dtype (naive.h) and the floor is a few units
// of rounding at the scale of the reference. The reference and the naive run once per config, on a
// subset of the call when the whole would take the fp64 reference too long (plan_check).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config.h"
#include "host_array.h"

namespace fabench {

// What is compared: batches [0, batches), query rows [row_begin, seqlen_q), query heads [0, heads) with
// their kv heads [0, heads_k), every key. Only trailing query rows are taken so that the bottom-right
// aligned mask of the sliced call is the original's.
struct CheckPlan {
  int64_t batches = 0, heads = 0, heads_k = 0, row_begin = 0;
  bool kv_grads = true;     // dk/dv compared; false once rows are sliced (they sum over every query row)
  std::string skip_reason;  // non-empty: no subset fits the reference's budget
  std::string label;        // "" for the whole call, else e.g. "b0,h0-1" or "b0,h0-1,rows 15872-16383,dq only"
};

CheckPlan plan_check(const BenchConfig& c);

// Outputs of one backend run as downloaded, in the call's full dense layouts; those the mode does not
// produce are absent.
struct RunOutputs {
  HostArray out, lse, dq, dk, dv;
};

struct CheckResult {
  enum class Verdict { passed, failed, skipped } verdict = Verdict::skipped;
  std::string summary;  // the table cell: "passed", "FAILED (b0,h0-1)", "skipped: ..."
  std::string detail;   // what failed, by how much
};

class Checker {
 public:
  Checker(const BenchConfig& cfg, const HostInputs& inputs);
  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  const CheckPlan& plan() const { return plan_; }
  // Computes the reference and the naive baseline on the first call.
  CheckResult check(const RunOutputs& got);

 private:
  struct Expected {
    std::vector<float> out, lse, dq, dk, dv;
  };
  void prepare();

  BenchConfig cfg_;
  const HostInputs& inputs_;
  CheckPlan plan_;
  std::optional<Expected> reference_, naive_;
};

}  // namespace fabench
