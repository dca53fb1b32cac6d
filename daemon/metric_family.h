#ifndef TRAINSUP_DAEMON_METRIC_FAMILY_H_
#define TRAINSUP_DAEMON_METRIC_FAMILY_H_

// Building prometheus-cpp metric families by hand, the way the collectors
// render state at scrape time.

#include <string>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace trainsup {

inline prometheus::MetricFamily Family(std::string name, std::string help,
                                       prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

// One sample; a counter or a gauge as the family says.
inline void AddSample(prometheus::MetricFamily& family,
                      std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
}

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_METRIC_FAMILY_H_
