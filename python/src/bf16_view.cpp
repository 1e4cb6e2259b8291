// numpy has no bfloat16 of its own: ml_dtypes.bfloat16 arrays cannot be exported through DLPack or the
// buffer protocol. The Python layer passes their uint16 view here and gets back a DLPack-capable array
// of dtype bfloat16 over the same memory, which the attention functions then accept like any other.

#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "flashattn/error.h"

namespace flashattn::python {

void bind_bf16_view(nb::module_& m) {
  m.def(
      "_bf16_view",
      [](nb::object source) {
        const nb::ndarray<nb::ro> bits = nb::cast<nb::ndarray<nb::ro>>(source);
        const nb::dlpack::dtype dt = bits.dtype();
        if (!(dt.code == uint8_t(nb::dlpack::dtype_code::UInt) && dt.bits == 16 && dt.lanes == 1))
          throw Error(Status::invalid_argument,
                      "flashattn._C._bf16_view: source: expected dtype uint16, got DLPack type code " +
                          std::to_string(int(dt.code)) + " of width " + std::to_string(int(dt.bits)));
        std::vector<size_t> shape(bits.ndim());
        std::vector<int64_t> strides(bits.ndim());
        for (size_t i = 0; i < bits.ndim(); ++i) {
          shape[i] = bits.shape(i);
          strides[i] = bits.stride(i);
        }
        // Writable on purpose: the same view carries the output arrays; `source` stays alive as owner.
        return nb::ndarray<nb::array_api>(
            const_cast<void*>(bits.data()), bits.ndim(), shape.data(), source, strides.data(),
            nb::dlpack::dtype{uint8_t(nb::dlpack::dtype_code::Bfloat), 16, 1}, bits.device_type(), bits.device_id());
      },
      nb::arg("source"), "A bfloat16 DLPack view of a uint16 array holding bfloat16 bit patterns (internal).");
}

}  // namespace flashattn::python
