#ifndef TRAINSUP_DAEMON_SERVING_GATE_H_
#define TRAINSUP_DAEMON_SERVING_GATE_H_

#include <atomic>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"

namespace trainsup {

// Whether this trainsupd acts: serves agents and operators and runs its
// sweeps. Open unless an election (docs/ha.md) says this instance does not
// lead. Closed, every call is answered UNAVAILABLE with why (the leader's
// name and address when known), so that a client can go there.
// Thread-safe; acting() is one atomic load, cheap enough per message.
class ServingGate {
 public:
  bool acting() const { return acting_.load(std::memory_order_acquire); }
  // OK while acting, else the refusal.
  grpc::Status Check() const {
    if (acting()) return grpc::Status::OK;
    absl::MutexLock lock(&mu_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, why_);
  }
  void Open() { acting_.store(true, std::memory_order_release); }
  void Close(std::string why) {
    {
      absl::MutexLock lock(&mu_);
      why_ = std::move(why);
    }
    acting_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> acting_{true};
  mutable absl::Mutex mu_;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SERVING_GATE_H_
