#ifndef TRAINSUP_DAEMON_ACCESS_CONTROL_H_
#define TRAINSUP_DAEMON_ACCESS_CONTROL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "daemon/access_policy.h"
#include "daemon/serving_gate.h"

namespace trainsup {

// The gRPC side of AccessPolicy: reads who is calling from the call's TLS
// peer and metadata, asks the policy, and logs and counts every refusal.
// Thread-safe.
class AccessControl {
 public:
  // `operator_token` empty: no token is accepted.
  AccessControl(AccessPolicy policy, std::string operator_token);

  // Who the call comes from (its certificate, its bearer token).
  Caller CallerOf(const grpc::ServerContextBase& context) const;

  // OK, or the refusal as UNAUTHENTICATED / PERMISSION_DENIED, logged with
  // the peer and `what` (the RPC, or "hello node=n1 job=j").
  grpc::Status Check(const Caller& caller, const std::string& peer, Access access,
                     absl::string_view what, absl::string_view node = {});
  // The same for a call: a standby's refusal also names the leader in the
  // call's trailing metadata (ServingFor).
  grpc::Status Check(grpc::ServerContextBase& context, Access access, absl::string_view what) {
    if (grpc::Status s = ServingFor(&context); !s.ok()) return s;
    return Check(CallerOf(context), context.peer(), access, what);
  }

  bool open() const { return policy_.open(); }

  // Calls are refused while `gate` (not owned; may be null) is closed: a
  // standby under an election serves no one (docs/ha.md).
  void set_gate(const ServingGate* gate) { gate_ = gate; }
  // OK while this instance acts, else the gate's refusal (also per message).
  grpc::Status Serving() const { return gate_ == nullptr ? grpc::Status::OK : gate_->Check(); }
  // Serving(); a refusal also puts the leader's address (empty when not
  // known) in `context`'s trailing metadata (kLeaderMetadataKey), for
  // clients to follow (docs/ha.md). Call before the call finishes.
  grpc::Status ServingFor(grpc::ServerContextBase* context) const;

  // Refused calls so far, indexed by Refusal.
  static constexpr int kRefusalKinds = static_cast<int>(Refusal::kWrongNode) + 1;
  std::array<uint64_t, kRefusalKinds> refused() const;

 private:
  bool TokenMatches(absl::string_view presented) const;

  const AccessPolicy policy_;
  const std::string operator_token_;
  const ServingGate* gate_ = nullptr;
  std::array<std::atomic<uint64_t>, kRefusalKinds> refused_{};
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_ACCESS_CONTROL_H_
