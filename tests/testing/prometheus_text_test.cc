#include "tests/testing/prometheus_text.h"

#include "gtest/gtest.h"

namespace traind::testing {
namespace {

constexpr char kValid[] = R"(# HELP requests_total Requests.
# TYPE requests_total counter
requests_total{code="OK",method="/a.B/C"} 3
requests_total{code="NOT_FOUND",method="/a.B/C"} 1 1700000000000
# TYPE latency_seconds histogram
latency_seconds_bucket{le="0.1"} 1
latency_seconds_bucket{le="1"} 2
latency_seconds_bucket{le="+Inf"} 2
latency_seconds_sum 0.5
latency_seconds_count 2
# A plain comment
temperature{room="a \"quoted\" \\ name\n"} NaN
)";

TEST(PrometheusTextTest, AcceptsValidExposition) {
  auto families = ParsePrometheusText(kValid);
  ASSERT_TRUE(families.ok()) << families.status();
  ASSERT_EQ(families->size(), 3u);
  EXPECT_EQ((*families)[0].type, "counter");
  const PrometheusSample* ok = FindSample(*families, "requests_total", {{"code", "OK"}});
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok->value, 3);
  EXPECT_EQ((*families)[2].samples[0].labels.at("room"), "a \"quoted\" \\ name\n");
}

TEST(PrometheusTextTest, RejectsMalformedText) {
  const char* bad[] = {
      "1bad_name 1\n",                                    // name starts with a digit
      "m{l=\"unterminated} 1\n",                          // unterminated label value
      "m 1 2 3\n",                                        // too many fields
      "m abc\n",                                          // not a number
      "# TYPE m counter\n# TYPE m counter\nm 1\n",        // second TYPE
      "m 1\n# TYPE m counter\n",                          // TYPE after samples
      "a 1\nb 1\na 2\n",                                  // family not grouped
      "m{a=\"1\"} 1\nm{a=\"1\"} 2\n",                     // duplicate series
      "# TYPE c counter\nc -1\n",                         // negative counter
      "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",  // not cumulative
      "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_count 1\n",                         // no +Inf
      "m 1",                                              // no trailing newline
      "m{bad-label=\"x\"} 1\n",                           // bad label name
  };
  for (const char* text : bad) {
    EXPECT_FALSE(ParsePrometheusText(text).ok()) << text;
  }
}

}  // namespace
}  // namespace traind::testing
