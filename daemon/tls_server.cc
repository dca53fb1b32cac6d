#include "daemon/tls_server.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/pem.h"

namespace trainsup {
namespace {

constexpr size_t kMaxPem = 1 << 20;
constexpr char kKeyFile[] = "key.pem";
constexpr char kCertFile[] = "cert.pem";
constexpr char kCaFile[] = "ca.pem";

// Writes `data` to `dir/name` through a temporary file and a rename, so that
// the certificate watcher never reads half a file.
absl::Status WriteAtomically(const std::string& dir, const char* name, const std::string& data) {
  const std::string final_path = absl::StrCat(dir, "/", name);
  const std::string temp_path = absl::StrCat(final_path, ".new");
  {
    std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
    out << data;
    if (!out.flush()) return absl::InternalError(absl::StrCat("cannot write ", temp_path));
  }
  if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", temp_path));
  }
  return absl::OkStatus();
}

}  // namespace

bool IsLoopbackListen(const std::string& host_port) {
  std::string host = host_port.substr(0, host_port.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<std::unique_ptr<ServerCertificates>> ServerCertificates::Create(
    const ServerTlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!options.enabled()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  // The private copy holds the key: a directory only this process reads.
  std::string pattern = (std::filesystem::temp_directory_path() / "trainsupd-tls-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("cannot create a private directory like ", pattern));
  }
  std::unique_ptr<ServerCertificates> certificates(new ServerCertificates(options, pattern));
  if (absl::Status s = certificates->CheckAndStage(); !s.ok()) return s;

  // Reloads reach handshakes within this many seconds of the staged copy changing.
  constexpr unsigned int kRefreshSeconds = 1;
  const std::string dir = certificates->stage_dir_;
  certificates->provider_ =
      options.mutual()
          ? std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                absl::StrCat(dir, "/", kKeyFile), absl::StrCat(dir, "/", kCertFile),
                absl::StrCat(dir, "/", kCaFile), kRefreshSeconds)
          : std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
                absl::StrCat(dir, "/", kKeyFile), absl::StrCat(dir, "/", kCertFile),
                kRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions tls(certificates->provider_);
  tls.watch_identity_key_cert_pairs();
  if (options.mutual()) {
    tls.watch_root_certs();
    // A certificate presented is verified in the handshake; a client that
    // presents none gets through it to be refused by the access policy
    // (UNAUTHENTICATED, with the reason), not a closed socket.
    tls.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  certificates->credentials_ = grpc::experimental::TlsServerCredentials(tls);
  if (certificates->credentials_ == nullptr) {
    return absl::InternalError("gRPC refused the TLS server options");
  }
  return certificates;
}

ServerCertificates::~ServerCertificates() {
  std::error_code ignored;
  std::filesystem::remove_all(stage_dir_, ignored);
}

absl::Status ServerCertificates::Reload() { return CheckAndStage(); }

absl::Status ServerCertificates::CheckAndStage() {
  absl::StatusOr<std::string> cert_pem = ReadSmallFile(options_.cert_file, kMaxPem, "certificate");
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadSmallFile(options_.key_file, kMaxPem, "private key");
  if (!key_pem.ok()) return key_pem.status();
  if (absl::Status s = CheckCertificateAndKey(*cert_pem, options_.cert_file, *key_pem,
                                              options_.key_file);
      !s.ok()) {
    return s;
  }
  std::string ca_pem;
  if (options_.mutual()) {
    absl::StatusOr<std::string> ca = ReadSmallFile(options_.client_ca_file, kMaxPem, "client CA");
    if (!ca.ok()) return ca.status();
    if (absl::Status s = CheckHoldsCertificate(*ca, "client CA", options_.client_ca_file);
        !s.ok()) {
      return s;
    }
    ca_pem = *std::move(ca);
  }
  // The key first: the watcher checks that key and certificate match, and
  // simply tries again a second later if it read them mid-change.
  ::chmod(stage_dir_.c_str(), 0700);
  if (absl::Status s = WriteAtomically(stage_dir_, kKeyFile, *key_pem); !s.ok()) return s;
  if (absl::Status s = WriteAtomically(stage_dir_, kCertFile, *cert_pem); !s.ok()) return s;
  if (options_.mutual()) {
    if (absl::Status s = WriteAtomically(stage_dir_, kCaFile, ca_pem); !s.ok()) return s;
  }
  summary_ = CertificateSummary(*cert_pem);
  return absl::OkStatus();
}

}  // namespace trainsup
