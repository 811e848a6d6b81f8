#include "engine/testing/float64_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace traind::engine::testing {

std::vector<double> SoftmaxFloat64Reference(const Tensor& x, int64_t axis, int opset, bool log_softmax) {
  const Shape& shape = x.shape();
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axis < 0) axis += rank;
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) {
      outer *= shape[d];
    } else if (d == axis || opset < 13) {
      n *= shape[d];
    } else {
      inner *= shape[d];
    }
  }
  const float* in = x.data<float>();
  std::vector<double> y(static_cast<size_t>(x.num_elements()));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t a) { return (o * n + a) * inner + i; };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t a = 0; a < n; ++a) max = std::max(max, static_cast<double>(in[at(a)]));
      double sum = 0;
      for (int64_t a = 0; a < n; ++a) sum += std::exp(in[at(a)] - max);
      for (int64_t a = 0; a < n; ++a) {
        y[at(a)] = log_softmax ? (in[at(a)] - max) - std::log(sum) : std::exp(in[at(a)] - max) / sum;
      }
    }
  }
  return y;
}

double MaxScaledError(const Tensor& actual, const std::vector<double>& reference, double floor) {
  double worst = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double a = actual.data<float>()[i];
    worst = std::max(worst, std::fabs(a - reference[i]) / std::max(std::fabs(reference[i]), floor));
  }
  return worst;
}

}  // namespace traind::engine::testing
