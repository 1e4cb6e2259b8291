#include "runner.h"

#include <exception>
#include <functional>
#include <stdexcept>

namespace fabench {

namespace {

using flashattn::DeviceType;

// Why `name` cannot run the call; empty when it can.
std::string reason_in(const std::vector<flashattn::BackendSupport>& answers, const std::string& name) {
  for (const flashattn::BackendSupport& s : answers)
    if (s.name == name) return s.supported ? std::string() : s.reason;
  return "not registered in this build";
}

int device_slot(DeviceType d) { return d == DeviceType::cuda ? 1 : 0; }

}  // namespace

Runner::Runner(RunSettings settings, Timer* cpu_timer, Timer* cuda_timer)
    : settings_(settings), cpu_timer_(cpu_timer), cuda_timer_(cuda_timer) {}

Timer& Runner::timer_for(DeviceType device) const {
  Timer* t = device == DeviceType::cuda ? cuda_timer_ : cpu_timer_;
  if (!t) throw std::logic_error("flashattn-bench: no timer for a CUDA backend (no CUDA device selected)");
  return *t;
}

ConfigResult Runner::run(const BenchConfig& cfg, const HostInputs& inputs,
                         const std::vector<flashattn::BackendInfo>& backends) {
  ConfigResult result{cfg, {}};
  std::unique_ptr<Checker> checker = settings_.check ? std::make_unique<Checker>(cfg, inputs) : nullptr;
  for (auto& t : tensors_) t.reset();
  for (const flashattn::BackendInfo& b : backends) result.rows.push_back(run_backend(b, cfg, inputs, checker.get()));
  // Free the device memory of this config before the next one allocates its own.
  for (auto& t : tensors_) t.reset();
  compute_speedups(result);
  return result;
}

Row Runner::run_backend(const flashattn::BackendInfo& backend, const BenchConfig& cfg, const HostInputs& inputs,
                        Checker* checker) {
  Row row;
  row.impl = backend.name;
  row.device = backend.device;
  const RunCounts counts = backend.device == DeviceType::cuda ? settings_.cuda : settings_.cpu;
  row.warmup = counts.warmup;
  row.iters = counts.iters;
  try {
    Timer& timer = timer_for(backend.device);
    row.device_name = timer.device_name();
    const flashattn::Stream stream = timer.stream();
    std::unique_ptr<CallTensors>& tensors = tensors_[device_slot(backend.device)];
    if (!tensors) {
      const flashattn::Device device =
          backend.device == DeviceType::cuda ? flashattn::Device::cuda(0) : flashattn::Device::cpu();
      tensors = std::make_unique<CallTensors>(cfg, inputs, device, stream);
    }
    const flashattn::BwdParams params = tensors->params(backend.name);
    const flashattn::FwdParams& fwd_params = params;

    const std::string fwd_reason = reason_in(flashattn::query_backends(fwd_params), backend.name);
    const std::string bwd_reason =
        cfg.has_backward() ? reason_in(flashattn::query_backends(params), backend.name) : std::string();
    std::string why;
    if (cfg.mode == Mode::fwd) why = fwd_reason;
    if (cfg.mode == Mode::bwd) why = bwd_reason;
    if (cfg.mode == Mode::fwdbwd && !fwd_reason.empty()) why = "forward: " + fwd_reason;
    if (cfg.mode == Mode::fwdbwd && fwd_reason.empty() && !bwd_reason.empty()) why = "backward: " + bwd_reason;
    if (!why.empty()) {
      row.status = Row::Status::unsupported;
      row.note = why;
      return row;
    }

    // A timed backward reads out and lse from this backend's own forward when it has one (as in
    // training), else from the forward dispatch picks on the same device.
    auto forward_for_backward = [&] {
      flashattn::FwdParams f = fwd_params;
      if (!fwd_reason.empty()) f.options.backend.clear();
      flashattn::forward(f, stream);
    };
    std::function<void(flashattn::Stream)> call;
    switch (cfg.mode) {
      case Mode::fwd:
        call = [&](flashattn::Stream s) { flashattn::forward(fwd_params, s); };
        break;
      case Mode::bwd:
        call = [&](flashattn::Stream s) { flashattn::backward(params, s); };
        break;
      case Mode::fwdbwd:
        call = [&](flashattn::Stream s) {
          flashattn::forward(fwd_params, s);
          flashattn::backward(params, s);
        };
        break;
    }

    if (checker) {
      tensors->poison_outputs();
      if (cfg.mode == Mode::bwd) forward_for_backward();
      call(stream);
      row.check = checker->check(tensors->download());
    } else {
      row.check = CheckResult{CheckResult::Verdict::skipped, "-", {}};
      if (cfg.mode == Mode::bwd) forward_for_backward();
    }
    row.median_ms = median(timer.time_ms(call, counts.warmup, counts.iters));
    row.status = Row::Status::measured;
  } catch (const std::exception& e) {
    row.status = Row::Status::error;
    row.note = e.what();
  }
  return row;
}

}  // namespace fabench
