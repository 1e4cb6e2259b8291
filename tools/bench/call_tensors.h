#pragma once

// The tensors of one config on one device, and the flashattn params that point at them.

#include <string>

#include "buffer.h"
#include "check.h"
#include "config.h"
#include "flashattn/params.h"
#include "host_array.h"

namespace fabench {

class CallTensors {
 public:
  // Uploads the inputs; outputs (and the gradients when the mode has a backward) are allocated unwritten.
  CallTensors(const BenchConfig& cfg, const HostInputs& inputs, Device device, flashattn::Stream stream);

  // Params of the call with `backend` forced. A BwdParams is also the forward call (its FwdParams base);
  // the gradient tensors are absent when the mode has no backward.
  flashattn::BwdParams params(const std::string& backend) const;

  void poison_outputs();        // NaN everywhere a backend writes, so an unwritten element fails the check
  RunOutputs download() const;  // what the mode produces: out and lse (fwd), dq, dk and dv (bwd)

 private:
  BenchConfig cfg_;
  Buffer q_, k_, v_, out_, lse_, dout_, dq_, dk_, dv_;
};

}  // namespace fabench
