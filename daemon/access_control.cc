#include "daemon/access_control.h"

#include <utility>

#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "common/log.h"
#include "common/supervisor_addresses.h"

namespace trainsup {
namespace {

absl::string_view View(const grpc::string_ref& ref) { return {ref.data(), ref.size()}; }

}  // namespace

AccessControl::AccessControl(AccessPolicy policy, std::string operator_token)
    : policy_(policy), operator_token_(std::move(operator_token)) {}

// Constant time in the token's content: a caller cannot learn a prefix by
// timing refusals. (The length may leak; tokens are long and random.)
bool AccessControl::TokenMatches(absl::string_view presented) const {
  if (operator_token_.empty() || presented.size() != operator_token_.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < presented.size(); ++i) {
    diff |= static_cast<unsigned char>(presented[i] ^ operator_token_[i]);
  }
  return diff == 0;
}

Caller AccessControl::CallerOf(const grpc::ServerContextBase& context) const {
  Caller caller;
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // The handshake verifies every client certificate presented against the
  // client CA, so a certificate seen here is one the CA vouched for.
  if (auth != nullptr && !auth->FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME).empty()) {
    caller.certified = true;
    for (const grpc::string_ref& uri : auth->FindPropertyValues(GRPC_PEER_URI_PROPERTY_NAME)) {
      absl::string_view text = View(uri);
      if (text == kOperatorUri) caller.operator_certificate = true;
      if (absl::ConsumePrefix(&text, kNodeUriPrefix) && !text.empty()) {
        caller.nodes.emplace_back(text);
      }
    }
    for (const grpc::string_ref& dns : auth->FindPropertyValues(GRPC_PEER_DNS_PROPERTY_NAME)) {
      caller.nodes.emplace_back(View(dns));
    }
  }
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    absl::string_view value = View(it->second);
    caller.token = absl::ConsumePrefix(&value, "Bearer ") && TokenMatches(value)
                       ? Caller::Token::kValid
                       : Caller::Token::kInvalid;
  }
  return caller;
}

grpc::Status AccessControl::Check(const Caller& caller, const std::string& peer, Access access,
                                  absl::string_view what, absl::string_view node) {
  if (grpc::Status serving = Serving(); !serving.ok()) return serving;
  AccessDecision decision = policy_.Decide(caller, access, node);
  if (decision.allowed()) return grpc::Status::OK;
  refused_[static_cast<int>(decision.refusal)].fetch_add(1, std::memory_order_relaxed);
  TRAINSUP_LOG_WARN("refused %s from %s (%s): %s", std::string(what), caller.Describe(), peer,
                    decision.message);
  const grpc::StatusCode code =
      decision.refusal == Refusal::kUnauthenticated || decision.refusal == Refusal::kBadToken
          ? grpc::StatusCode::UNAUTHENTICATED
          : grpc::StatusCode::PERMISSION_DENIED;
  return grpc::Status(code, decision.message);
}

grpc::Status AccessControl::ServingFor(grpc::ServerContextBase* context) const {
  grpc::Status serving = Serving();
  if (serving.ok()) return serving;
  // Empty when the leader is not known: the key alone says that a trainsupd
  // answered (a standby, or a leader that stopped acting).
  context->AddTrailingMetadata(kLeaderMetadataKey, gate_->leader());
  return serving;
}

std::array<uint64_t, AccessControl::kRefusalKinds> AccessControl::refused() const {
  std::array<uint64_t, kRefusalKinds> counts{};
  for (int i = 0; i < kRefusalKinds; ++i) counts[i] = refused_[i].load(std::memory_order_relaxed);
  return counts;
}

}  // namespace trainsup
