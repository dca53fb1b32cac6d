#include "common/pem.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

// OpenSSL objects freed when they leave scope.
struct BioDeleter { void operator()(BIO* b) const { BIO_free(b); } };
struct X509Deleter { void operator()(X509* x) const { X509_free(x); } };
struct KeyDeleter { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
using Bio = std::unique_ptr<BIO, BioDeleter>;
using Cert = std::unique_ptr<X509, X509Deleter>;
using Key = std::unique_ptr<EVP_PKEY, KeyDeleter>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// A failed read leaves its reasons in OpenSSL's per-thread error queue,
// where gRPC's own TLS code would find them later: they are cleared.
Cert FirstCertificate(const std::string& pem) {
  Cert cert(PEM_read_bio_X509(MemoryBio(pem).get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) ERR_clear_error();
  return cert;
}

Key PrivateKey(const std::string& pem) {
  Key key(PEM_read_bio_PrivateKey(MemoryBio(pem).get(), nullptr, nullptr, nullptr));
  if (key == nullptr) ERR_clear_error();
  return key;
}

std::string Text(BIO* bio) {
  char* data = nullptr;
  long size = BIO_get_mem_data(bio, &data);
  return std::string(data, size > 0 ? static_cast<size_t>(size) : 0);
}

}  // namespace

absl::Status CheckCertificateAndKey(const std::string& cert_pem, absl::string_view cert_file,
                                    const std::string& key_pem, absl::string_view key_file) {
  if (absl::Status s = CheckHoldsCertificate(cert_pem, "certificate", cert_file); !s.ok()) {
    return s;
  }
  Cert cert = FirstCertificate(cert_pem);
  Key key = PrivateKey(key_pem);
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("private key ", key_file, " holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("private key ", key_file, " does not match certificate ", cert_file));
  }
  return absl::OkStatus();
}

absl::Status CheckHoldsCertificate(const std::string& pem, absl::string_view what,
                                   absl::string_view file) {
  if (FirstCertificate(pem) == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", file, " holds no PEM certificate"));
  }
  return absl::OkStatus();
}

std::string CertificateSummary(const std::string& cert_pem) {
  Cert cert = FirstCertificate(cert_pem);
  if (cert == nullptr) return "";
  Bio out(BIO_new(BIO_s_mem()));
  X509_NAME_print_ex(out.get(), X509_get_subject_name(cert.get()), 0, XN_FLAG_ONELINE);
  BIO_puts(out.get(), ", valid until ");
  ASN1_TIME_print(out.get(), X509_get0_notAfter(cert.get()));
  return Text(out.get());
}

}  // namespace trainsup
