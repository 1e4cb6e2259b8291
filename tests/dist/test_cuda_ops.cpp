// The CUDA DeviceOps of ring attention against the host ones (src/dist/host_ops.cpp, the semantics) on
// random strided views: every op, every storage dtype, LSE rows of -inf (nothing seen yet) and +inf (a
// block the row saw no key of), a poisoned accumulator that a row's first merge must not read, and
// padding around each view that no op may write. Skips when no GPU is visible.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dist/device_ops.h"
#include "flashattn/error.h"
#include "host_tensor.h"
#include "test_stream.h"

namespace fa_test {
namespace {

namespace ring = flashattn::dist::detail;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One buffer on the host and a copy on cuda:0, each with the same strided view: `shape` inside a buffer
// one larger in every dim but the last, starting at index 1 of each of those dims.
class Twin {
 public:
  Twin(DType dtype, std::vector<int64_t> shape, std::mt19937_64& rng) : shape_(std::move(shape)) {
    std::vector<int64_t> padded = shape_;
    for (size_t d = 0; d + 1 < padded.size(); ++d) padded[d] += 1;
    host_ = HostTensor(dtype, padded);
    host_.fill_normal(rng);
    upload();
  }
  void upload() { device_ = DeviceTensor(host_, flashattn::Device::cuda(0)); }
  HostTensor& host() { return host_; }
  const HostTensor& host() const { return host_; }
  HostTensor from_device() const { return device_.download(); }
  Tensor view(bool on_device) const {
    const Tensor full = on_device ? device_.view() : host_.view();
    Tensor t = full;
    t.data = static_cast<char*>(full.data) + start() * flashattn::dtype_size(full.dtype);
    for (size_t d = 0; d < shape_.size(); ++d) t.shape[d] = shape_[d];
    return t;
  }
  // Calls f with the element index (into the whole buffer) of every element of the view.
  void each(const std::function<void(int64_t)>& f) const {
    const Tensor t = view(false);
    std::vector<int64_t> idx(shape_.size(), 0);
    for (int64_t n = 0; n < t.numel(); ++n) {
      int64_t offset = start(), rest = n;
      for (int d = t.ndim - 1; d >= 0; --d) {
        offset += (rest % t.shape[d]) * t.stride[d];
        rest /= t.shape[d];
      }
      f(offset);
    }
  }

 private:
  int64_t start() const {
    const Tensor full = host_.view();
    int64_t s = 0;
    for (int d = 0; d + 1 < full.ndim; ++d) s += full.stride[d];
    return s;
  }
  std::vector<int64_t> shape_;
  HostTensor host_;
  DeviceTensor device_;
};

// Element-wise |got - want| <= rel * max(1, |want|); NaN and infinities must match exactly.
testing::AssertionResult near(const char* what, const HostTensor& got, const HostTensor& want, double rel) {
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.get(i), w = want.get(i);
    const bool same_special = (std::isnan(g) && std::isnan(w)) || (std::isinf(w) && g == w);
    if (std::isnan(w) || std::isinf(w) || std::isnan(g) || std::isinf(g)) {
      if (!same_special) return testing::AssertionFailure() << what << "[" << i << "]: cuda " << g << ", host " << w;
      continue;
    }
    if (std::abs(g - w) > rel * std::max(1.0, std::abs(w)))
      return testing::AssertionFailure() << what << "[" << i << "]: cuda " << g << ", host " << w;
  }
  return testing::AssertionSuccess();
}

// Two units of rounding of the dtype: the merge's exp/log differ in the last bits between host and
// device, which can move a rounded output by one unit.
double rounding(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 2.0 / 256;
    case DType::f16:
      return 2.0 / 2048;
    default:
      return 1e-5;
  }
}

class CudaDeviceOps : public testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device visible";
    stream_.emplace();
  }
  // Runs `op` with the host ops on host views and with the CUDA ops on device views.
  void both(const std::function<void(ring::DeviceOps&, bool, flashattn::Stream)>& op) {
    op(ring::host_ops(), false, nullptr);
    op(ring::device_ops(flashattn::Device::cuda(0)), true, stream_->get());
  }
  testing::AssertionResult agree(const char* what, const Twin& t, double rel) {
    return near(what, t.from_device(), t.host(), rel);
  }
  std::optional<TestStream> stream_;
};

TEST_P(CudaDeviceOps, MergeAndFinishMatchTheHost) {
  const DType dt = GetParam();
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  const int64_t nb = 2, rows = 37, heads = 3, dim = 72;  // dim not a multiple of a warp
  Twin acc(DType::f32, {nb, rows, heads, dim}, rng), acc_lse(DType::f32, {nb, heads, rows}, rng);
  Twin part1(dt, {nb, rows, heads, dim}, rng), part2(dt, {nb, rows, heads, dim}, rng);
  Twin lse1(DType::f32, {nb, heads, rows}, rng), lse2(DType::f32, {nb, heads, rows}, rng);
  Twin out(dt, {nb, rows, heads, dim}, rng), out_lse(DType::f32, {nb, heads, rows}, rng);
  Twin out_only(dt, {nb, rows, heads, dim}, rng);
  // The accumulator starts undefined: a row's first merge must overwrite it, not scale it.
  acc.host().poison();
  acc.upload();
  // About a third of the rows see no key of each block (+inf); some see none of either.
  for (Twin* lse : {&lse1, &lse2}) {
    lse->each([&](int64_t i) { lse->host().set(i, coin(rng) < 0.35 ? kInf : 3.0 * (coin(rng) - 0.5)); });
    lse->upload();
  }
  int64_t empty_rows = 0;
  lse1.each([&](int64_t i) { empty_rows += std::isinf(lse1.host().get(i)) && std::isinf(lse2.host().get(i)); });
  ASSERT_GT(empty_rows, 0) << "the random data must cover rows that saw no key at all";

  both([&](ring::DeviceOps& ops, bool dev, flashattn::Stream s) {
    ops.fill(acc_lse.view(dev), -std::numeric_limits<float>::infinity(), s);
  });
  EXPECT_TRUE(agree("acc_lse after fill", acc_lse, 0.0));
  for (auto [part, lse] : {std::pair{&part1, &lse1}, std::pair{&part2, &lse2}}) {
    both([&](ring::DeviceOps& ops, bool dev, flashattn::Stream s) {
      ops.merge_partial(acc.view(dev), acc_lse.view(dev), part->view(dev), lse->view(dev), s);
    });
    EXPECT_TRUE(agree("acc_out after merge", acc, 1e-5));
    EXPECT_TRUE(agree("acc_lse after merge", acc_lse, 1e-5));
  }
  both([&](ring::DeviceOps& ops, bool dev, flashattn::Stream s) {
    ops.finish_forward(acc.view(dev), acc_lse.view(dev), out.view(dev), out_lse.view(dev), s);
    ops.finish_forward(acc.view(dev), acc_lse.view(dev), out_only.view(dev), Tensor{}, s);
  });
  EXPECT_TRUE(agree("out", out, rounding(dt)));
  EXPECT_TRUE(agree("lse", out_lse, 1e-5));
  EXPECT_TRUE(agree("out without lse", out_only, rounding(dt)));
}

TEST_P(CudaDeviceOps, CopyFillAccumulateConvertMatchTheHost) {
  const DType dt = GetParam();
  std::mt19937_64 rng(23);
  const std::vector<int64_t> shape{3, 21, 2, 40};
  Twin src(dt, shape, rng), dst(dt, shape, rng), acc(DType::f32, shape, rng), rounded(dt, shape, rng);
  Twin filled(dt, {2, 5, 33}, rng);  // an lse-like 3-dim view
  both([&](ring::DeviceOps& ops, bool dev, flashattn::Stream s) {
    ops.copy(src.view(dev), dst.view(dev), s);
    ops.accumulate(acc.view(dev), src.view(dev), s);
    ops.convert(acc.view(dev), rounded.view(dev), s);
    ops.fill(filled.view(dev), -1.375f, s);
  });
  // No arithmetic beyond one add and one rounding: host and device agree exactly.
  EXPECT_TRUE(agree("copy", dst, 0.0));
  EXPECT_TRUE(agree("accumulate", acc, 0.0));
  EXPECT_TRUE(agree("convert", rounded, 0.0));
  EXPECT_TRUE(agree("fill", filled, 0.0));
}

TEST_P(CudaDeviceOps, AllocateAndByteCopies) {
  ring::DeviceOps& ops = ring::device_ops(flashattn::Device::cuda(0));
  const std::vector<uint8_t> bytes{1, 2, 3, 4, 5, 250, 251};
  std::vector<uint8_t> back(bytes.size(), 0);
  {
    const ring::Buffer buf = ops.allocate(bytes.size(), stream_->get());
    ASSERT_NE(buf.data(), nullptr);
    ops.to_device(bytes.data(), buf.data(), bytes.size(), stream_->get());
    ops.to_host(buf.data(), back.data(), back.size(), stream_->get());
  }
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(ops.allocate(0, stream_->get()).data(), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaDeviceOps, testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const testing::TestParamInfo<DType>& info) { return flashattn::dtype_name(info.param); });

TEST(CudaDeviceOpsErrors, UnknownDeviceIsAnArgumentError) {
  try {
    ring::device_ops(flashattn::Device::cuda(1000));
    ADD_FAILURE() << "device_ops accepted cuda:1000";
  } catch (const flashattn::Error& e) {
    EXPECT_EQ(e.status(), flashattn::Status::invalid_argument) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:1000"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fa_test
