#ifndef TRAINSUP_DAEMON_LISTEN_CHECK_H_
#define TRAINSUP_DAEMON_LISTEN_CHECK_H_

#include <string>

#include "absl/status/status.h"

namespace trainsup {

// Whether trainsupd can listen on `host_port` ("127.0.0.1:7411",
// "[::1]:7411", "localhost:7411"), found by binding a TCP socket to each
// address the host resolves to, as gRPC and civetweb bind theirs
// (SO_REUSEADDR, and never SO_REUSEPORT: two supervisors must not share a
// port), then closing it. gRPC and civetweb only log why a bind failed; this
// says it. Errors: Unavailable "HOST:PORT: address in use (...)" when another
// process listens there; InvalidArgument when the host does not resolve or
// is not an address of this machine; PermissionDenied for a privileged port.
absl::Status CheckCanListen(const std::string& host_port);

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_LISTEN_CHECK_H_
