// Errors of the C++ library surface in Python with the library's message, as the exception type that
// says what went wrong: a bad call (ValueError), a valid call nothing implements (NotImplementedError),
// anything else (RuntimeError).

#include <string>

#include "bindings.h"
#include "flashattn/error.h"

namespace flashattn::python {

namespace {

PyObject* exception_type(Status status) {
  switch (status) {
    case Status::invalid_argument:
      return PyExc_ValueError;
    case Status::unsupported:
      return PyExc_NotImplementedError;
    default:
      return PyExc_RuntimeError;
  }
}

}  // namespace

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(exception_type(e.status()), e.what());
    }
  });

  // Lets the tests check the translation of every status without provoking each failure for real.
  m.def(
      "_raise_status",
      [](int status, const std::string& message) { throw Error(static_cast<Status>(status), message); },
      nb::arg("status"), nb::arg("message"), "Raise flashattn::Error(status, message) (for tests).");
}

}  // namespace flashattn::python
