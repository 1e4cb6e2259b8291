// libFuzzer target over the C API (flashattn_c.h): forward, backward and forward_kvcache on the CPU
// backends with fuzzed ranks, shapes, strides, dtypes, options, varlen offsets, caches and page tables.
// The promise it checks (docs/reliability.md): every input either runs or is rejected with an
// invalid_argument/unsupported status, a message, and nothing written; an accepted call writes only its
// outputs, only inside their views, and cpu_flash agrees with the fp64 cpu_reference. Built with ASan and
// UBSan, any out-of-bounds access or undefined behaviour is a crash too.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "byte_reader.h"
#include "fuzz_call.h"
#include "fuzz_check.h"

namespace fa_fuzz {
namespace {

// Calls estimated above this many multiply-adds are validated but not run: both backends run every call,
// and the fp64 reference under ASan would make such inputs too slow to explore many.
constexpr int64_t kRunBudget = int64_t(1) << 22;
constexpr const char* kUnknownBackend = "no_such_backend";

bool must_be_rejected(const FuzzCall& c) {
  if (!c.backend_null && c.backend == kUnknownBackend) return true;
  for (const FuzzTensor& t : c.tensors)
    if (t.present() && t.unallocatable()) return true;
  return false;
}

// Validation alone: an unknown backend name is reported only after the whole call has been validated.
void validate_only(const FuzzCall& call) {
  FuzzCall c = call;
  const int status = c.run(kUnknownBackend);
  if (status == FLASHATTN_OK) fail("an unknown backend was accepted", kUnknownBackend);
  check_rejected(call, c, status);
}

// Backward needs the out and LSE of a forward: the reference computes them into the call's own views.
// Returns whether that forward was accepted. It may not be while backward is: out and softmax_lse are
// outputs there and inputs here (an out whose elements repeat is a valid input, not a valid output).
bool fill_forward_outputs(FuzzCall& call) {
  FuzzCall fwd = call;
  fwd.op = Op::forward;
  if (fwd.run("cpu_reference") != FLASHATTN_OK) return false;
  call.tensors[kOut] = fwd.tensors[kOut];
  call.tensors[kLse] = fwd.tensors[kLse];
  return true;
}

void fuzz_one(const uint8_t* data, size_t size) {
  ByteReader reader(data, size);
  FuzzCall call = decode_call(reader);
  set_current_call(&call);
  if (call.cost > kRunBudget) {
    validate_only(call);
    return;
  }
  const bool have_forward = call.op != Op::backward || fill_forward_outputs(call);

  const bool verbose = std::getenv("FLASHATTN_FUZZ_VERBOSE") != nullptr;  // to read what an input does
  if (verbose) std::fprintf(stderr, "%s", describe(call).c_str());
  FuzzCall first = call;
  const int status = first.run();
  if (verbose) std::fprintf(stderr, "status %d: %s\n", status, flashattn_last_error());
  if (status != FLASHATTN_OK) {
    check_rejected(call, first, status);
    return;
  }
  if (must_be_rejected(call)) fail("accepted a call that must be rejected", "unknown backend or unallocatable view");
  check_writes_in_views(call, first);
  if (!have_forward) return;  // out and LSE are not a forward's: the backends need not agree

  // Run the other CPU backend on the same inputs (automatic choice is cpu_flash in a CPU-only build).
  const bool ran_reference = !call.backend_null && call.backend == "cpu_reference";
  FuzzCall second = call;
  if (second.run(ran_reference ? "cpu_flash" : "cpu_reference") != FLASHATTN_OK)
    fail("the other CPU backend rejected an accepted call", flashattn_last_error());
  check_matches_reference(call, ran_reference ? second : first, ran_reference ? first : second);
}

}  // namespace
}  // namespace fa_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fa_fuzz::fuzz_one(data, size);
  return 0;
}
