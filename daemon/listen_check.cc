#include "daemon/listen_check.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace trainsup {
namespace {

// The errno of binding and listening on `address`; 0 when both succeed.
int TryListen(const addrinfo& address) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int error = 0;
  if (bind(fd, address.ai_addr, address.ai_addrlen) != 0 || listen(fd, 1) != 0) error = errno;
  close(fd);
  return error;
}

absl::Status Explain(const std::string& host_port, const std::string& port, int error) {
  switch (error) {
    case EADDRINUSE:
      return absl::UnavailableError(absl::StrCat(
          host_port, ": address in use (another trainsupd, or another program, listens there; "
                     "`ss -ltnp 'sport = :", port, "'` names it)"));
    case EADDRNOTAVAIL:
      return absl::InvalidArgumentError(
          absl::StrCat(host_port, ": not an address of this machine"));
    case EACCES:
      return absl::PermissionDeniedError(absl::StrCat(
          host_port, ": permission denied (ports below 1024 need CAP_NET_BIND_SERVICE)"));
    default:
      return absl::UnavailableError(absl::StrCat(host_port, ": ", std::strerror(error)));
  }
}

}  // namespace

absl::Status CheckCanListen(const std::string& host_port) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("'", host_port, "' is not HOST:PORT"));
  }
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int resolved =
      getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(host_port, ": cannot resolve ", host, ": ", gai_strerror(resolved)));
  }
  // A name may resolve to an address family this machine lacks (::1
  // without IPv6): listening on the others is enough, as for gRPC. A port
  // taken or forbidden on any of them is not.
  int first_error = 0;
  bool bound_any = false;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int error = TryListen(*a);
    if (error == EADDRINUSE || error == EACCES) {
      first_error = error;
      bound_any = false;
      break;
    }
    if (error == 0) bound_any = true;
    if (first_error == 0) first_error = error;
  }
  freeaddrinfo(found);
  if (bound_any || first_error == 0) return absl::OkStatus();
  return Explain(host_port, port, first_error);
}

}  // namespace trainsup
