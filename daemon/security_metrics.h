#ifndef TRAINSUP_DAEMON_SECURITY_METRICS_H_
#define TRAINSUP_DAEMON_SECURITY_METRICS_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "daemon/access_control.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace trainsup {

// The security series of /metrics (docs/metrics.md): refused calls by
// reason, whether the gRPC port is plain text on the network, certificate
// reloads. Thread-safe.
class SecurityCollector : public prometheus::Collectable {
 public:
  SecurityCollector(const AccessControl* access, bool insecure_listen)
      : access_(access), insecure_listen_(insecure_listen) {}

  void CountReload(bool ok) { (ok ? reloads_ok_ : reloads_failed_).fetch_add(1); }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const AccessControl* const access_;
  const bool insecure_listen_;
  std::atomic<uint64_t> reloads_ok_{0};
  std::atomic<uint64_t> reloads_failed_{0};
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SECURITY_METRICS_H_
