// Reading a server's Prometheus metrics in tests: one plain HTTP GET of
// /metrics and the value of one series of the text it returns.
#ifndef FEDGATHER_TESTS_E2E_METRICS_SCRAPE_H_
#define FEDGATHER_TESTS_E2E_METRICS_SCRAPE_H_

#include <string>

namespace fedgather::testing {

// Scrape GETs http://127.0.0.1:port/metrics and returns the body (the test
// fails, and "" is returned, when there is no HTTP answer).
std::string Scrape(int port);

// MetricValue returns the sample `series` (name and labels, exactly as
// exposed) of `text`, or -1 when it is absent.
double MetricValue(const std::string& text, const std::string& series);

}  // namespace fedgather::testing

#endif  // FEDGATHER_TESTS_E2E_METRICS_SCRAPE_H_
