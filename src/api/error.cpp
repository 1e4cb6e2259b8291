#include "flashattn/error.h"

#include "flashattn/version.h"

namespace flashattn {

const char* status_name(Status s) {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::invalid_argument:
      return "invalid_argument";
    case Status::unsupported:
      return "unsupported";
    case Status::device_error:
      return "device_error";
    case Status::out_of_memory:
      return "out_of_memory";
    case Status::internal:
      return "internal";
  }
  return "unknown";
}

const char* version() { return FLASHATTN_VERSION_STRING; }

}  // namespace flashattn
