#pragma once

// The fuzzer's oracles. Each failed check prints what went wrong and aborts, which libFuzzer records as a
// crash with the input that caused it.

#include "fuzz_call.h"

namespace fa_fuzz {

// The call being checked, described by fail().
void set_current_call(const FuzzCall* call);
[[noreturn]] void fail(const char* what, const char* detail);

// A rejected call: a known status, a message starting with "flashattn", and no byte of any tensor changed.
void check_rejected(const FuzzCall& before, const FuzzCall& after, int status);
// An accepted call: inputs unchanged, and outputs changed only at the elements of their views.
void check_writes_in_views(const FuzzCall& before, const FuzzCall& after);
// cpu_flash against cpu_reference on the same call: every output within a tolerance derived from the
// dtype, the input magnitudes and how far fp32 logits can be off (see fuzz_check.cpp).
void check_matches_reference(const FuzzCall& call, const FuzzCall& flash, const FuzzCall& reference);

}  // namespace fa_fuzz
