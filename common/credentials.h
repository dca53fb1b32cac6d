#ifndef TRAINSUP_COMMON_CREDENTIALS_H_
#define TRAINSUP_COMMON_CREDENTIALS_H_

// How the agent and trainsupctl prove who they are to a TLS trainsupd, and
// the file reading all three binaries share for keys and tokens.

#include <cstddef>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/string_view.h"
#include "absl/status/statusor.h"

namespace trainsup {

// A client's TLS settings (flags --tls-ca, --tls-cert, --tls-key,
// --tls-server-name, or $TRAINSUP_TLS_CA, ...). docs/security.md.
struct ClientTlsOptions {
  // PEM bundle of the CA that signed trainsupd's certificate. Empty: plain
  // text (a loopback or --insecure supervisor). Default: empty.
  std::string ca_file;
  // This client's certificate chain and key (PEM), for mutual TLS: an agent's
  // names its node, an operator's carries URI trainsup:role:operator.
  std::string cert_file;
  std::string key_file;
  // The name expected in trainsupd's certificate when it differs from the
  // host of --supervisor (tests, or an address behind a load balancer).
  std::string server_name;

  bool enabled() const { return !ca_file.empty(); }
};

// Reads a whole file of at most `max_bytes`; errors name `what` and `path`.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                          absl::string_view what);

// Reads a bearer token: one line of printable ASCII (trailing whitespace
// dropped), 16 to 4096 characters.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// The credentials for a channel to trainsupd: TLS (mutual when a certificate
// is given) or plain text, plus `token` as an `authorization: Bearer` header
// when not empty. A token without TLS is an error: it would cross the
// network in clear. The files are checked here (PEM, a key that matches its
// certificate), with errors that name them, not by gRPC at the first call.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& tls, const std::string& token);

// Adds the server-name override to a channel's arguments, if one is set.
void ApplyServerName(const ClientTlsOptions& tls, grpc::ChannelArguments* args);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_CREDENTIALS_H_
