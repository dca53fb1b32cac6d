#ifndef TRAINSUP_COMMON_PEM_H_
#define TRAINSUP_COMMON_PEM_H_

// Checks of PEM certificates and keys before they are handed to gRPC, which
// would otherwise fail later with its own internals in the message. OpenSSL
// underneath (already gRPC's).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainsup {

// OK when `cert_pem` holds a PEM certificate and `key_pem` an unencrypted PEM
// private key that matches it. Errors name the files (`cert_file`,
// `key_file`) and what is wrong with them.
absl::Status CheckCertificateAndKey(const std::string& cert_pem, absl::string_view cert_file,
                                    const std::string& key_pem, absl::string_view key_file);

// OK when `pem` holds at least one PEM certificate; else an error naming
// `what` ("client CA") and `file`.
absl::Status CheckHoldsCertificate(const std::string& pem, absl::string_view what,
                                   absl::string_view file);

// "CN = trainsupd, valid until Nov 30 12:00:00 2027 GMT" for the first
// certificate in `cert_pem`; empty when it holds none.
std::string CertificateSummary(const std::string& cert_pem);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_PEM_H_
