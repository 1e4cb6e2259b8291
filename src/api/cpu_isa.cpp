// Which instruction-set build of cpu_flash's kernels runs (cpu/flash/isa.cpp lists them): the best this
// CPU runs, FLASHATTN_CPU_ISA from the environment (read once), or set_cpu_isa().

#include <atomic>
#include <cstdlib>

#include "cpu/flash/flash.h"
#include "flashattn/api.h"

namespace flashattn {

namespace {

using detail::cpu_flash::IsaKernels;
using detail::cpu_flash::runnable_isas;

std::string runnable_names() {
  std::string names;
  for (const IsaKernels* k : runnable_isas()) names += std::string(names.empty() ? "" : ", ") + k->name;
  return names;
}

const IsaKernels& find(const std::string& name, const char* where) {
  for (const IsaKernels* k : runnable_isas())
    if (name == k->name) return *k;
  throw Error(Status::invalid_argument, std::string(where) +
                                            ": expected an instruction set of this build that this CPU runs {" +
                                            runnable_names() + "}, got '" + name + "'");
}

const IsaKernels& from_environment() {
  const char* env = std::getenv("FLASHATTN_CPU_ISA");
  if (!env || !*env) return *runnable_isas().front();
  return find(env, "FLASHATTN_CPU_ISA");
}

std::atomic<const IsaKernels*> forced{nullptr};

}  // namespace

namespace detail::cpu_flash {

const IsaKernels& active_isa() {
  if (const IsaKernels* k = forced.load(std::memory_order_acquire)) return *k;
  // A bad FLASHATTN_CPU_ISA throws on every call (not once and then silently the default).
  static const IsaKernels* const from_env = [] {
    try {
      return &from_environment();
    } catch (const Error&) {
      return static_cast<const IsaKernels*>(nullptr);
    }
  }();
  return from_env ? *from_env : from_environment();
}

}  // namespace detail::cpu_flash

std::vector<std::string> cpu_isas() {
  std::vector<std::string> out;
  for (const IsaKernels* k : runnable_isas()) out.push_back(k->name);
  return out;
}

std::string cpu_isa() { return detail::cpu_flash::active_isa().name; }

void set_cpu_isa(const std::string& name) {
  forced.store(name.empty() ? nullptr : &find(name, "flashattn::set_cpu_isa: name"), std::memory_order_release);
}

}  // namespace flashattn
