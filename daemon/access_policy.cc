#include "daemon/access_policy.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainsup {

std::string Caller::Describe() const {
  std::string who;
  if (operator_certificate) {
    who = "operator certificate";
  } else if (!nodes.empty()) {
    who = absl::StrCat("certificate for node ", absl::StrJoin(nodes, ","));
  } else if (certified) {
    who = "client certificate";
  }
  const char* token_text = token == Token::kValid     ? "operator token"
                           : token == Token::kInvalid ? "wrong token"
                                                      : nullptr;
  if (token_text != nullptr) who = who.empty() ? token_text : absl::StrCat(who, " + ", token_text);
  return who.empty() ? "anonymous" : who;
}

const char* RefusalName(Refusal refusal) {
  switch (refusal) {
    case Refusal::kNone: return "none";
    case Refusal::kUnauthenticated: return "unauthenticated";
    case Refusal::kBadToken: return "bad_token";
    case Refusal::kNotOperator: return "not_operator";
    case Refusal::kWrongNode: return "wrong_node";
  }
  return "unknown";
}

namespace {

AccessDecision Refuse(Refusal refusal, std::string message) { return {refusal, std::move(message)}; }

}  // namespace

AccessDecision AccessPolicy::Decide(const Caller& caller, Access access,
                                    absl::string_view node) const {
  if (!options_.authenticate) return {};
  // A wrong token is refused even beside a good certificate: someone is
  // guessing, and saying so beats silently ignoring it.
  if (caller.token == Caller::Token::kInvalid) {
    return Refuse(Refusal::kBadToken, "the bearer token is not the operator token");
  }
  // Mutual TLS: the handshake lets a client without a certificate through
  // so that it is told why here (a failed handshake reads as "cannot reach").
  if (options_.agents_need_certificate && !caller.certified) {
    return Refuse(
        Refusal::kUnauthenticated,
        absl::StrCat("mutual TLS: every call needs a client certificate the supervisor's "
                     "--tls-client-ca signed (--tls-cert and --tls-key)",
                     caller.token == Caller::Token::kValid
                         ? "; the operator token makes a certificate's holder an operator, it "
                           "does not replace the certificate"
                         : ""));
  }
  const bool token = caller.token == Caller::Token::kValid;
  switch (access) {
    case Access::kRead:
      if (caller.certified || token) return {};
      return Refuse(Refusal::kUnauthenticated,
                    "reading needs a client certificate or the operator token");
    case Access::kMutate:
      if (caller.operator_certificate || token) return {};
      if (caller.certified) {
        return Refuse(Refusal::kNotOperator,
                      absl::StrCat("a ", caller.Describe(),
                                   " is not an operator's: changes need a certificate with URI ",
                                   kOperatorUri, " or the operator token"));
      }
      return Refuse(Refusal::kUnauthenticated,
                    absl::StrCat("changes need an operator certificate (URI ", kOperatorUri,
                                 ") or the operator token"));
    case Access::kAgentHello:
      if (!options_.agents_need_certificate) return {};
      if (std::find(caller.nodes.begin(), caller.nodes.end(), node) != caller.nodes.end()) return {};
      if (!caller.certified || caller.nodes.empty()) {
        return Refuse(caller.certified ? Refusal::kWrongNode : Refusal::kUnauthenticated,
                      absl::StrCat("a hello for node ", node, " needs a certificate naming it (URI ",
                                   kNodeUriPrefix, node, " or DNS ", node, "); this is a ",
                                   caller.Describe()));
      }
      return Refuse(Refusal::kWrongNode,
                    absl::StrCat("the ", caller.Describe(), " may not say hello as node ", node));
  }
  return Refuse(Refusal::kUnauthenticated, "unknown access");
}

}  // namespace trainsup
