#include "api/index_check.h"

#include <cstdlib>
#include <string>
#include <string_view>

#include "api/checks.h"

#if defined(FLASHATTN_WITH_CUDA)
#include "cuda/common/index_check.h"
#endif

namespace flashattn::detail {

namespace {

std::string bracket(int64_t i) { return "[" + std::to_string(i) + "]"; }

template <typename Problem>
void check_on_device(const Problem& p, const AttentionOptions& options, Stream stream, const char* function) {
  if (p.device.type != DeviceType::cuda || !index_check_requested(options)) return;
#if defined(FLASHATTN_WITH_CUDA)
  const auto s = static_cast<cudaStream_t>(stream);
  if (cuda::stream_is_capturing(s))
    ArgChecker(function).fail("check_index_values (or FLASHATTN_CHECK_INDEX_VALUES)",
                              "off during CUDA graph capture (the check copies its result to the host)",
                              "a stream being captured");
  const IndexFault f = cuda::find_index_fault(p, s);
  if (f.found()) raise_index_fault(function, f, p.device);
#else
  (void)stream;
  (void)function;
#endif
}

}  // namespace

bool index_check_requested(const AttentionOptions& options) {
  if (options.check_index_values) return true;
  const char* v = std::getenv("FLASHATTN_CHECK_INDEX_VALUES");
  return v != nullptr && std::string_view(v) == "1";
}

void check_index_values_on_device(const FwdProblem& p, const AttentionOptions& options, Stream stream,
                                  const char* function) {
  check_on_device(p, options, stream, function);
}

void check_index_values_on_device(const KVCacheProblem& p, const AttentionOptions& options, Stream stream,
                                  const char* function) {
  check_on_device(p, options, stream, function);
}

void raise_index_fault(const char* function, const IndexFault& f, const Device& device) {
  const ArgChecker c(function);
  const std::string b = bracket(f.batch), v = std::to_string(f.value), on = " (checked on " + device_name(device) + ")";
  using K = IndexFaultKind;
  const bool is_k = f.kind >= K::cu_seqlens_k_first && f.kind <= K::cu_seqlens_k_total;
  const std::string cu = is_k ? "cu_seqlens_k" : "cu_seqlens_q";
  switch (f.kind) {
    case K::cu_seqlens_q_first:
    case K::cu_seqlens_k_first:
      c.fail(cu, "cu_seqlens[0] == 0", v + on);
    case K::cu_seqlens_q_order:
    case K::cu_seqlens_k_order:
      c.fail(
          cu, "non-decreasing offsets",
          "cu_seqlens" + b + " = " + v + " < cu_seqlens" + bracket(f.batch - 1) + " = " + std::to_string(f.bound) + on);
    case K::cu_seqlens_q_max:
    case K::cu_seqlens_k_max:
      c.fail(cu,
             std::string("sequence lengths <= ") + (is_k ? "max_seqlen_k" : "max_seqlen_q") + " = " +
                 std::to_string(f.bound),
             "length " + v + " for sequence " + std::to_string(f.batch - 1) + on);
    case K::cu_seqlens_q_total:
    case K::cu_seqlens_k_total:
      c.fail(cu, "cu_seqlens[batch] equal to the number of rows (" + std::to_string(f.bound) + ")", v + on);
    case K::block_table_short:
      c.fail("block_table" + b, "enough pages for cache_seqlens" + b + " = " + v + " plus the new tokens",
             std::to_string(f.bound) + " positions (max_blocks_per_seq * page_size)" + on);
    case K::cache_seqlens:
      c.fail("cache_seqlens" + b, "a length in [0, " + std::to_string(f.bound) + "] (cache capacity minus new tokens)",
             v + on);
    case K::rotary_cos:
      c.fail("rotary_cos",
             "at least " + std::to_string(f.value + 1) + " rows (the last query of sequence " +
                 std::to_string(f.batch) + " is rotated at position " + v + ")",
             std::to_string(f.bound) + " rows" + on);
    case K::cache_batch_idx:
      c.fail("cache_batch_idx" + b, "an index in [0, " + std::to_string(f.bound) + ")", v + on);
    case K::cache_leftpad:
      c.fail("cache_leftpad" + b, "a value in [0, cache_seqlens" + b + " = " + std::to_string(f.bound) + "]", v + on);
    case K::block_table:
      c.fail("block_table" + b + bracket(f.entry), "a block index in [0, " + std::to_string(f.bound) + ")", v + on);
    case K::none:
      break;
  }
  throw Error(Status::internal, std::string(function) + ": index check: unknown fault kind");
}

}  // namespace flashattn::detail
