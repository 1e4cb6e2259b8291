#pragma once

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0
#define FLASHATTN_VERSION_STRING "0.1.0"

namespace flashattn {

// The version the library was built as; compare with FLASHATTN_VERSION_STRING to detect header/library skew.
const char* version();

}  // namespace flashattn
