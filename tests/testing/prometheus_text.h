// A strict reader of the Prometheus text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), used to prove that /metrics is valid.
#ifndef TRAIND_TESTS_TESTING_PROMETHEUS_TEXT_H_
#define TRAIND_TESTS_TESTING_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace traind::testing {

struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PrometheusFamily {
  std::string name;
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
  std::vector<PrometheusSample> samples;
};

// Parses and validates: metric and label name syntax, label value escapes, float values (NaN, +Inf, -Inf),
// HELP/TYPE placement (TYPE at most once per family and before its samples), samples grouped by family,
// no duplicate series, histograms with cumulative non-decreasing `le` buckets ending in +Inf whose value
// equals _count. Errors name the line.
absl::StatusOr<std::vector<PrometheusFamily>> ParsePrometheusText(const std::string& text);

// The sample of `name` whose labels include every pair of `labels`, or null.
const PrometheusSample* FindSample(const std::vector<PrometheusFamily>& families, const std::string& name,
                                   const std::map<std::string, std::string>& labels);

}  // namespace traind::testing

#endif  // TRAIND_TESTS_TESTING_PROMETHEUS_TEXT_H_
