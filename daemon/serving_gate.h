#ifndef TRAINSUP_DAEMON_SERVING_GATE_H_
#define TRAINSUP_DAEMON_SERVING_GATE_H_

#include <atomic>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/synchronization/mutex.h"
#include "daemon/ha/acting_deadline.h"

namespace trainsup {

// Whether this trainsupd acts: serves agents and operators and runs its
// sweeps. Open unless an election (docs/ha.md) says this instance does not
// lead; opened under an election, it acts only until the lease's deadline
// too. Closed, every call is answered UNAVAILABLE with why (the leader's
// name and address when known, also as the leader() address a client can
// follow), so that a client can go there.
// Thread-safe; acting() is an atomic load (and a clock read under an
// election), cheap enough per message.
class ServingGate {
 public:
  bool acting() const {
    if (!acting_.load(std::memory_order_acquire)) return false;
    const ActingDeadline* deadline = deadline_.load(std::memory_order_acquire);
    return deadline == nullptr || deadline->Allows();
  }
  // OK while acting, else the refusal.
  grpc::Status Check() const {
    if (acting()) return grpc::Status::OK;
    if (acting_.load(std::memory_order_acquire)) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "suspended: this trainsupd's leadership lease is past its renewal "
                          "deadline; retry");
    }
    absl::MutexLock lock(&mu_);
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, why_);
  }
  // Acts from now on, while `deadline` (not owned; null: always) allows.
  void Open(const ActingDeadline* deadline = nullptr) {
    deadline_.store(deadline, std::memory_order_release);
    acting_.store(true, std::memory_order_release);
  }
  // The leader's address a closed gate names ("" while open or unknown).
  std::string leader() const {
    if (acting_.load(std::memory_order_acquire)) return "";
    absl::MutexLock lock(&mu_);
    return leader_;
  }
  // `leader`: the leader's gRPC address, HOST:PORT, when known (else ""),
  // for a client to follow (leader()).
  void Close(std::string why, std::string leader = "") {
    {
      absl::MutexLock lock(&mu_);
      why_ = std::move(why);
      leader_ = std::move(leader);
    }
    acting_.store(false, std::memory_order_release);
  }

 private:
  std::atomic<bool> acting_{true};
  std::atomic<const ActingDeadline*> deadline_{nullptr};
  mutable absl::Mutex mu_;
  std::string why_ ABSL_GUARDED_BY(mu_);
  std::string leader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SERVING_GATE_H_
