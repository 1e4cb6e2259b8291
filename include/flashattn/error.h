#pragma once

#include <stdexcept>
#include <string>

namespace flashattn {

// Every failure of the library surfaces as an Error carrying one of these codes.
// The numeric values are part of the C API (flashattn_c.h) and must not change.
enum class Status : int {
  ok = 0,
  invalid_argument = 1,  // the call itself is wrong: shape, dtype, device, value out of range
  unsupported = 2,       // valid call, but no (or not the requested) backend implements it
  device_error = 3,      // the CUDA runtime or a kernel launch failed
  out_of_memory = 4,     // a documented workspace could not be allocated
  internal = 5,          // a bug in flashattn
};

const char* status_name(Status s);

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  Status status() const { return status_; }

 private:
  Status status_;
};

}  // namespace flashattn
