// Float64 references for ops whose float kernels the tests hold to a bound on their error rather than to each other
// (two float kernels can each be accurate and still differ by the sum of their errors).
#ifndef TRAIND_ENGINE_TESTING_FLOAT64_REFERENCE_H_
#define TRAIND_ENGINE_TESTING_FLOAT64_REFERENCE_H_

#include <vector>

#include "engine/core/tensor.h"

namespace traind::engine::testing {

// Softmax (or log softmax) of the float tensor x in float64: opset < 13 normalises over the 2-D coercion at `axis`
// (every axis from it on), opset 13 over `axis` alone.
std::vector<double> SoftmaxFloat64Reference(const Tensor& x, int64_t axis, int opset, bool log_softmax);

// The largest |actual - reference| / max(|reference|, floor) over a float tensor: floor 1 measures a log softmax's
// error on the scale of log(sum) (its absolute error near 0, relative elsewhere).
double MaxScaledError(const Tensor& actual, const std::vector<double>& reference, double floor);

}  // namespace traind::engine::testing

#endif  // TRAIND_ENGINE_TESTING_FLOAT64_REFERENCE_H_
