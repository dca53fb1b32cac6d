#ifndef TRAINSUP_DAEMON_TLS_SERVER_H_
#define TRAINSUP_DAEMON_TLS_SERVER_H_

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainsup {

// trainsupd's TLS settings (docs/security.md).
struct ServerTlsOptions {
  // PEM certificate chain and private key of trainsupd. Both or neither.
  // Default: none (plain text; loopback only unless --insecure).
  std::string cert_file;
  std::string key_file;
  // PEM bundle of the CA that signs agents' and operators' certificates.
  // Set: every client must present a certificate it verifies (mutual TLS).
  std::string client_ca_file;

  bool enabled() const { return !cert_file.empty(); }
  bool mutual() const { return !client_ca_file.empty(); }
};

// The server's TLS credentials, re-readable without dropping a connection.
//
// gRPC's FileWatcherCertificateProvider re-reads its files every second and
// hands new handshakes what it read; open connections keep theirs. It is
// pointed at a private copy of the operator's files that changes only when
// Reload() has checked the new ones (certificate and key parse and match),
// so that a half-written certificate on disk is never served and a change
// takes effect when the operator says so (SIGHUP), as with nginx.
class ServerCertificates {
 public:
  // Checks and copies the files. Errors name the file that is the trouble.
  static absl::StatusOr<std::unique_ptr<ServerCertificates>> Create(const ServerTlsOptions& options);
  ~ServerCertificates();  // removes the private copy

  ServerCertificates(const ServerCertificates&) = delete;
  ServerCertificates& operator=(const ServerCertificates&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

  // Re-reads the operator's files; new handshakes use them within about a
  // second. On error the served certificates stay as they were.
  absl::Status Reload();

  // "CN=trainsupd, valid until 2027-11-30T...": for the start-up log.
  const std::string& summary() const { return summary_; }

 private:
  ServerCertificates(ServerTlsOptions options, std::string stage_dir)
      : options_(std::move(options)), stage_dir_(std::move(stage_dir)) {}
  absl::Status CheckAndStage();

  const ServerTlsOptions options_;
  const std::string stage_dir_;
  std::string summary_;
  std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> provider_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

// True for 127.0.0.0/8, ::1 and "localhost" listen addresses.
bool IsLoopbackListen(const std::string& host_port);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_TLS_SERVER_H_
