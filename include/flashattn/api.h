#pragma once

#include <string>
#include <vector>

#include "flashattn/error.h"
#include "flashattn/params.h"
#include "flashattn/tensor.h"

namespace flashattn {

// Each call validates its arguments completely before anything is written; on a bad argument it throws
// Error(Status::invalid_argument) naming the argument, what was expected and what was given. The one
// exception: the values inside index tensors that live on a CUDA device (cu_seqlens, cache_seqlens,
// cache_leftpad, cache_batch_idx, block_table) are not read on the host, which would synchronise the
// device; out-of-range values there are the caller's error, as in flash-attn (docs/semantics.md).
// Calls on CUDA tensors are asynchronous on `stream` and never synchronise the device.
void forward(const FwdParams& params, Stream stream = nullptr);
void backward(const BwdParams& params, Stream stream = nullptr);
void forward_kvcache(const KVCacheParams& params, Stream stream = nullptr);

// How each registered backend answers a given call: the one dispatch would pick has `chosen` set.
struct BackendSupport {
  std::string name;
  DeviceType device;
  bool supported = false;
  bool chosen = false;
  std::string reason;   // why not, when !supported
  std::string variant;  // the backend's code path in this process, if it has several (cpu_flash: cpu_isa())
};

std::vector<BackendSupport> query_backends(const FwdParams& params);
std::vector<BackendSupport> query_backends(const BwdParams& params);
std::vector<BackendSupport> query_backends(const KVCacheParams& params);

struct BackendInfo {
  std::string name;
  DeviceType device;
};

// Every backend compiled into this build, in dispatch preference order.
std::vector<BackendInfo> list_backends();

// cpu_flash's kernels are compiled for several instruction sets; one is picked once per process: the
// best this CPU runs, unless the environment variable FLASHATTN_CPU_ISA or set_cpu_isa() names another.
// cpu_isas(): the builds compiled in that this CPU runs, best first ("avx512_bf16", "avx512", "avx2",
// "generic"; "native" alone in a FLASHATTN_NATIVE build). cpu_isa(): the one in use. set_cpu_isa(""):
// back to the automatic choice. An unknown or unrunnable name throws Error(invalid_argument).
std::vector<std::string> cpu_isas();
std::string cpu_isa();
void set_cpu_isa(const std::string& name);

// Whether this build has CUDA kernels, and how many CUDA devices the runtime sees (0 without CUDA).
bool built_with_cuda();
int cuda_device_count();

}  // namespace flashattn
