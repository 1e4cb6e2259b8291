#pragma once

// Reads the fuzzer's input bytes front to back as a sequence of decisions. Past the end every read is 0,
// and the decoders map 0 to the plain, valid choice: a short input is a simple valid call, and each byte
// the fuzzer adds or flips makes it more unusual.

#include <cstddef>
#include <cstdint>

namespace fa_fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(byte()) << (8 * i);
    return v;
  }
  // A value in [0, n).
  int64_t below(int64_t n) { return int64_t(byte()) % n; }
  // An element of a table; entry 0 is the default.
  template <typename T, size_t N>
  T pick(const T (&table)[N]) {
    return table[size_t(byte()) % N];
  }
  // True for about one input byte in `one_in` (never for 0).
  bool rare(int one_in) { return byte() >= 256 - 256 / one_in; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fa_fuzz
