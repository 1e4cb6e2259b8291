#include "criterion.h"

#include <cmath>
#include <sstream>

#include "common/criterion.h"

namespace fa_test {

namespace criterion = flashattn::detail::criterion;

double criterion_floor(DType dtype, const std::vector<double>& ref) {
  double scale = 1.0;
  for (double r : ref)
    if (std::isfinite(r)) scale = std::max(scale, std::fabs(r));
  return criterion::error_floor(dtype, scale);
}

testing::AssertionResult within_criterion(const std::string& what, const HostTensor& got,
                                          const std::vector<double>& ref, const std::vector<double>& naive,
                                          DType dtype) {
  if (got.numel() != int64_t(ref.size()) || naive.size() != ref.size())
    return testing::AssertionFailure() << what << ": size mismatch (got " << got.numel() << ", ref " << ref.size()
                                       << ", naive " << naive.size() << ")";
  double err = 0, naive_err = 0;
  int64_t worst = -1;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double e = criterion::difference(got.get(int64_t(i)), ref[i]);
    if (worst < 0 || e > err) {
      err = e;
      worst = int64_t(i);
    }
    naive_err = std::max(naive_err, criterion::difference(naive[i], ref[i]));
  }
  const double bound = 2.0 * naive_err + criterion_floor(dtype, ref);
  if (err <= bound) return testing::AssertionSuccess();
  std::ostringstream s;
  s << what << ": max |got - ref| = " << err << " exceeds 2 * " << naive_err << " (naive "
    << flashattn::dtype_name(dtype) << " error) + floor = " << bound;
  if (worst >= 0)
    s << "; worst at flat index " << worst << ": got " << got.get(worst) << ", ref " << ref[size_t(worst)];
  return testing::AssertionFailure() << s.str();
}

}  // namespace fa_test
