#ifndef TRAINSUP_DAEMON_ACCESS_POLICY_H_
#define TRAINSUP_DAEMON_ACCESS_POLICY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainsup {

// Who is calling, as far as the transport can prove it. Filled by
// AccessControl from the TLS handshake and the call's metadata; pure data so
// that the policy is a function that tests drive without a network.
struct Caller {
  enum class Token { kNone, kValid, kInvalid };

  // Presented a client certificate that the --tls-client-ca verified.
  bool certified = false;
  // Nodes its certificate names: URI SANs `trainsup:node:NAME`, and DNS SANs.
  std::vector<std::string> nodes;
  // Its certificate carries the URI SAN `trainsup:role:operator`.
  bool operator_certificate = false;
  Token token = Token::kNone;

  // "operator certificate", "certificate for node n1", "operator token",
  // "anonymous": for logs and refusal messages.
  std::string Describe() const;
};

// What a call wants to do.
enum class Access {
  kRead,        // ListJobs, GetJob, ListRanks, ListNodes, ListEvents, WatchEvents, GetStacks,
                //   Diagnose, GetProvenance
  kMutate,      // QuarantineNode, UnquarantineNode, ResumeJob, RequestCheckpoint
  kAgentHello,  // an agent says hello for a node
};

// Why a call was refused: the label of trainsup_calls_refused_total.
enum class Refusal {
  kNone,
  kUnauthenticated,  // no identity at all where one is needed
  kBadToken,         // a bearer token that is not the operator token
  kNotOperator,      // an identity, but not an operator's, asked to change something
  kWrongNode,        // an agent certificate saying hello for another node
};
const char* RefusalName(Refusal refusal);  // "unauthenticated", ...

struct AccessDecision {
  Refusal refusal = Refusal::kNone;
  std::string message;  // why, naming the caller and what it lacks; empty when allowed
  bool allowed() const { return refusal == Refusal::kNone; }
};

// Who may do what (docs/security.md):
// - open (no --tls-client-ca, no --operator-token-file): everyone may do
//   everything. Only for loopback, or with --insecure.
// - authenticated: reads need any identity (a verified client certificate
//   or the operator token); mutations need an operator identity (the
//   operator certificate URI or the token); an agent's hello needs a
//   certificate that names its node. Without --tls-client-ca (token only),
//   agents cannot prove a node and their hellos are taken on trust (the
//   daemon warns at start-up). With it (mutual TLS), every call needs a
//   certificate, the token's included: the token makes a certificate's
//   holder an operator, it does not replace the certificate.
class AccessPolicy {
 public:
  struct Options {
    // Anything beyond open mode is configured. Default: open.
    bool authenticate = false;
    // Mutual TLS: agents prove their node with their certificate, and every
    // call needs a certificate.
    bool agents_need_certificate = false;
  };

  explicit AccessPolicy(Options options) : options_(options) {}

  // `node` is the node an agent's hello names (kAgentHello only).
  AccessDecision Decide(const Caller& caller, Access access, absl::string_view node = {}) const;

  bool open() const { return !options_.authenticate; }

 private:
  const Options options_;
};

// The URI SANs trainsup reads from certificates.
inline constexpr absl::string_view kOperatorUri = "trainsup:role:operator";
inline constexpr absl::string_view kNodeUriPrefix = "trainsup:node:";

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_ACCESS_POLICY_H_#include "absl/strings/string_view.h"

