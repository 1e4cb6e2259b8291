// Facts about the build and the registered backends.

#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "bindings.h"
#include "flashattn/version.h"

namespace flashattn::python {

namespace {

const char* device_type_name(DeviceType d) { return d == DeviceType::cpu ? "cpu" : "cuda"; }

}  // namespace

nb::list backend_support_list(const std::vector<BackendSupport>& support) {
  nb::list out;
  for (const BackendSupport& s : support) {
    nb::dict d;
    d["name"] = s.name;
    d["device"] = device_type_name(s.device);
    d["supported"] = s.supported;
    d["chosen"] = s.chosen;
    d["reason"] = s.reason;
    d["variant"] = s.variant;
    out.append(d);
  }
  return out;
}

void bind_info(nb::module_& m) {
  m.def("version", &flashattn::version, "Version of the C++ library this module was built with.");
  m.def("built_with_cuda", &flashattn::built_with_cuda, "Whether the CUDA backends were compiled in.");
  m.def("cuda_device_count", &flashattn::cuda_device_count,
        "Number of CUDA devices the runtime sees (0 without CUDA or without a driver).");
  m.def(
      "list_backends",
      [] {
        nb::list out;
        for (const BackendInfo& b : flashattn::list_backends()) {
          nb::dict d;
          d["name"] = b.name;
          d["device"] = device_type_name(b.device);
          out.append(d);
        }
        return out;
      },
      "Every backend compiled in, in dispatch preference order, as dicts {name, device}.");
  m.def(
      "_read_arrays",
      [](nb::args arrays) {
        nb::list via;
        for (nb::handle a : arrays) {
          nb::detail::make_caster<InArray> caster;
          const bool read = caster.from_python(a, 0, nullptr);
          const ReadVia how = read ? caster.value.via : ReadVia::none;
          via.append(how == ReadVia::exchange     ? "exchange"
                     : how == ReadVia::attributes ? "attributes"
                     : how == ReadVia::ndarray    ? "ndarray"
                                                  : "none");
        }
        return via;
      },
      "How each argument would be read as an array argument: 'exchange' (DLPack's C exchange API), "
      "'attributes' (a torch.Tensor's attributes), 'ndarray' (DLPack or the buffer protocol) or 'none' (internal: "
      "tests and bench/host_cost.py).");
  m.def("cpu_isa", &flashattn::cpu_isa, "The instruction-set build of cpu_flash in use (see cpu_isas).");
  m.def("cpu_isas", &flashattn::cpu_isas, "cpu_flash's builds this CPU runs, best first.");
  m.def("set_cpu_isa", &flashattn::set_cpu_isa, nb::arg("name"),
        "Forces one of cpu_isas() for cpu_flash; '' restores the automatic choice.");
}

}  // namespace flashattn::python
