// Order statistics the benchmarks report (medians of per-step times, p10/p90).
#ifndef TRAIND_BENCH_BENCH_STATS_H_
#define TRAIND_BENCH_BENCH_STATS_H_

#include <algorithm>
#include <vector>

namespace traind::engine {

inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Nearest-rank percentile, p in [0, 1]; `values` must not be empty.
inline double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(p * (values.size() - 1) + 0.5)];
}

}  // namespace traind::engine

#endif  // TRAIND_BENCH_BENCH_STATS_H_
