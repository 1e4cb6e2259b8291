// flashattn-bench: times every flashattn backend on an attention call (or FlashAttention's sweep), each
// run checked against the fp64 reference. See docs/benchmarking.md.

#include <omp.h>

#include <iostream>
#include <memory>

#include "args.h"
#include "flashattn/flashattn.h"
#include "host_array.h"
#include "report.h"
#include "runner.h"
#include "selection.h"
#include "sysinfo.h"
#include "timer_cpu.h"

#if defined(FLASHATTN_WITH_CUDA)
#include "timer_cuda.h"
#endif

namespace fabench {
namespace {

// Defaults of --warmup/--iters per device: the CPU backends include the fp64 reference, which takes
// seconds on large calls; GPU runs are short and noisier, so the median is taken over many.
constexpr RunCounts kCpuCounts{1, 5};
constexpr RunCounts kCudaCounts{5, 50};
constexpr uint64_t kInputSeed = 20240601;

void print_version(std::ostream& os) {
  os << "flashattn-bench " << FLASHATTN_VERSION_STRING << "\n"
     << "flashattn library " << flashattn::version() << ", commit " << git_commit() << "\n"
     << "CUDA backends: "
     << (flashattn::built_with_cuda()
             ? "built, " + std::to_string(flashattn::cuda_device_count()) + " device(s) visible"
             : std::string("not built"))
     << "\n";
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.help) {
    std::cout << usage();
    return 0;
  }
  if (o.version) {
    print_version(std::cout);
    return 0;
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (!o.cpu_isa.empty()) flashattn::set_cpu_isa(o.cpu_isa);

  const std::vector<BenchConfig> configs =
      o.sweep ? sweep_configs(o.config, o.sweep_dims, o.sweep_seqlens) : std::vector<BenchConfig>{o.config};
  if (o.list) {
    for (const BenchConfig& c : configs) print_support(std::cout, c);
    return 0;
  }

  const Selection selection = select_backends(o);
  for (const std::string& note : selection.notes) std::cerr << "flashattn-bench: " << note << "\n";

  CpuTimer cpu_timer(o.cpu_time);
  std::unique_ptr<Timer> cuda_timer;
#if defined(FLASHATTN_WITH_CUDA)
  if (selection.cuda) cuda_timer = std::make_unique<CudaTimer>(0);
#endif

  RunInfo info;
  info.date = utc_date();
  info.version = flashattn::version();
  info.commit = git_commit();
  info.command_line = o.command_line;
  if (selection.cpu) info.devices.push_back(cpu_timer.describe() + "; cpu_flash ISA " + flashattn::cpu_isa());
  if (cuda_timer) info.devices.push_back(cuda_timer->describe());
  print_header(std::cout, info);

  RunSettings settings;
  settings.check = o.check;
  settings.cpu = kCpuCounts;
  settings.cuda = kCudaCounts;
  for (RunCounts* counts : {&settings.cpu, &settings.cuda}) {
    if (o.warmup) counts->warmup = *o.warmup;
    if (o.iters) counts->iters = *o.iters;
  }
  Runner runner(settings, &cpu_timer, cuda_timer.get());

  std::vector<ConfigResult> results;
  HostInputs inputs;
  const BenchConfig* inputs_of = nullptr;
  bool all_good = true;
  for (const BenchConfig& cfg : configs) {
    // The sweep's causal and non-causal configs share tensors: draw them once.
    if (!inputs_of || !inputs_of->same_tensors(cfg)) {
      inputs = make_inputs(cfg, kInputSeed);
      inputs_of = &cfg;
    }
    results.push_back(runner.run(cfg, inputs, selection.backends));
    print_table(std::cout, results.back());
    std::cout.flush();
    for (const Row& r : results.back().rows)
      all_good = all_good && r.status != Row::Status::error && r.check.verdict != CheckResult::Verdict::failed;
    // Rewritten after every config so that a run cut short still leaves its results behind.
    if (!o.json_path.empty()) write_json(o.json_path, info, results);
  }
  return all_good ? 0 : 1;
}

}  // namespace
}  // namespace fabench

int main(int argc, char** argv) {
  try {
    return fabench::run(argc, argv);
  } catch (const fabench::UsageError& e) {
    std::cerr << "flashattn-bench: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "flashattn-bench: error: " << e.what() << "\n";
    return 1;
  }
}
