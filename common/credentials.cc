#include "common/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/pem.h"

namespace trainsup {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes,
                                          absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::string data(max_bytes + 1, '\0');
  in.read(data.data(), static_cast<std::streamsize>(data.size()));
  data.resize(static_cast<size_t>(in.gcount()));
  if (data.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is larger than ", max_bytes, " bytes"));
  }
  if (data.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is empty"));
  return data;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, 4097, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripTrailingAsciiWhitespace(*text));
  if (token.size() < 16 || token.size() > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": the token must be 16 to 4096 characters (",
                     token.size(), " found); make one with `openssl rand -hex 32`"));
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", path, ": the token must be one line of printable ASCII"));
    }
  }
  return token;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& tls, const std::string& token) {
  if (!tls.enabled()) {
    if (!tls.cert_file.empty() || !tls.key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key need --tls-ca");
    }
    if (!token.empty()) {
      return absl::InvalidArgumentError(
          "a token needs TLS (--tls-ca): it must not cross the network in clear");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslCredentialsOptions ssl;
  constexpr size_t kMaxPem = 1 << 20;
  absl::StatusOr<std::string> ca = ReadSmallFile(tls.ca_file, kMaxPem, "CA bundle");
  if (!ca.ok()) return ca.status();
  if (absl::Status s = CheckHoldsCertificate(*ca, "CA bundle", tls.ca_file); !s.ok()) return s;
  ssl.pem_root_certs = *std::move(ca);
  if (!tls.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadSmallFile(tls.cert_file, kMaxPem, "certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadSmallFile(tls.key_file, kMaxPem, "private key");
    if (!key.ok()) return key.status();
    if (absl::Status s = CheckCertificateAndKey(*cert, tls.cert_file, *key, tls.key_file);
        !s.ok()) {
      return s;
    }
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::SslCredentials(ssl);
  if (!token.empty()) {
    credentials =
        grpc::CompositeChannelCredentials(credentials, grpc::AccessTokenCredentials(token));
  }
  return credentials;
}

void ApplyServerName(const ClientTlsOptions& tls, grpc::ChannelArguments* args) {
  if (tls.enabled() && !tls.server_name.empty()) args->SetSslTargetNameOverride(tls.server_name);
}

}  // namespace trainsup
