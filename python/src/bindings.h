#pragma once

// The parts of the flashattn._C module; module.cpp calls each once.

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <vector>

#include "flashattn/api.h"

namespace flashattn::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);     // flashattn::Error -> ValueError / NotImplementedError / RuntimeError
void bind_info(nb::module_& m);       // version, build and device facts, list_backends
void bind_attention(nb::module_& m);  // fwd, bwd and their query_* twins
void bind_kvcache(nb::module_& m);    // fwd_kvcache and query_fwd_kvcache
void bind_bf16_view(nb::module_& m);  // _bf16_view for numpy bfloat16 arrays
void bind_dist(nb::module_& m);       // the ring planner of flashattn::dist (flashattn.distributed)

// query_backends' answer as a list of dicts {name, device, supported, chosen, reason}.
nb::list backend_support_list(const std::vector<BackendSupport>& support);

}  // namespace flashattn::python
