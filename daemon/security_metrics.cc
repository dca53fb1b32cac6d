#include "daemon/security_metrics.h"

#include <string>
#include <utility>

#include "daemon/metric_family.h"

namespace trainsup {
using prometheus::MetricFamily;
using prometheus::MetricType;

std::vector<MetricFamily> SecurityCollector::Collect() const {
  MetricFamily refused = Family("trainsup_calls_refused_total",
                                "gRPC calls refused by the access policy, by reason.",
                                MetricType::Counter);
  const auto counts = access_->refused();
  for (int i = 1; i < AccessControl::kRefusalKinds; ++i) {
    AddSample(refused, {{"reason", RefusalName(static_cast<Refusal>(i))}},
        static_cast<double>(counts[i]));
  }
  MetricFamily insecure = Family(
      "trainsup_insecure_listen",
      "1 when the gRPC port serves plain text on a non-loopback address (--insecure).",
      MetricType::Gauge);
  AddSample(insecure, {}, insecure_listen_ ? 1 : 0);
  MetricFamily reloads = Family("trainsup_tls_reloads_total",
                                "TLS certificate reloads (SIGHUP), by result.", MetricType::Counter);
  AddSample(reloads, {{"result", "ok"}}, static_cast<double>(reloads_ok_.load()));
  AddSample(reloads, {{"result", "error"}}, static_cast<double>(reloads_failed_.load()));
  return {std::move(refused), std::move(insecure), std::move(reloads)};
}

}  // namespace trainsup
