#include "agent/rank_socket.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "agent/heartbeat_decoder.h"

namespace trainsup {
namespace {

absl::Status ErrnoError(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

// Ask for a large receive buffer, so that a burst of ranks (or a slow agent
// loop) queues datagrams instead of making the ranks drop them.
constexpr int kReceiveBufferBytes = 4 << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<RankSocket>> RankSocket::Open(std::string parent) {
  if (parent.empty()) {
    const char* runtime = getenv("XDG_RUNTIME_DIR");
    parent = (runtime != nullptr && *runtime != '\0') ? runtime : "/tmp";
  }
  std::string templ = absl::StrCat(parent, "/trainsup-agent.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return ErrnoError(absl::StrCat("mkdtemp in ", parent));
  std::string dir = templ;  // mkdtemp makes it 0700
  std::string path = absl::StrCat(dir, "/rank.sock");
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    rmdir(dir.c_str());
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", path));
  }
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    rmdir(dir.c_str());
    return ErrnoError("socket");
  }
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one));
  int rcvbuf = kReceiveBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status s = ErrnoError(absl::StrCat("bind ", path));
    close(fd);
    rmdir(dir.c_str());
    return s;
  }
  return std::unique_ptr<RankSocket>(new RankSocket(fd, dir, path));
}

RankSocket::RankSocket(int fd, std::string dir, std::string path)
    : fd_(fd), dir_(std::move(dir)), path_(std::move(path)) {
  // One byte more than accepted, so that an oversize datagram shows as such.
  buffer_.resize(kMaxHeartbeatDatagramBytes + 1);
}

RankSocket::~RankSocket() {
  close(fd_);
  // The directory is the agent's alone: the socket, the ranks' plan file,
  // their stack files.
  if (DIR* dir = opendir(dir_.c_str()); dir != nullptr) {
    while (dirent* entry = readdir(dir)) {
      const absl::string_view name(entry->d_name);
      if (name != "." && name != "..") unlinkat(dirfd(dir), entry->d_name, 0);
    }
    closedir(dir);
  }
  rmdir(dir_.c_str());
}

int RankSocket::QueueCapacity() {
  int qlen = 10;
  if (FILE* f = fopen("/proc/sys/net/unix/max_dgram_qlen", "re"); f != nullptr) {
    if (fscanf(f, "%d", &qlen) != 1) qlen = 10;
    fclose(f);
  }
  return qlen + 1;
}

int RankSocket::DrainAvailable(const std::function<void(const Datagram&)>& fn) {
  int count = 0;
  for (;;) {
    iovec iov{buffer_.data(), buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
      if (errno == EINTR) continue;
      return count;  // EAGAIN: drained
    }
    ++count;
    Datagram d;
    d.truncated = (msg.msg_flags & MSG_TRUNC) != 0 || static_cast<size_t>(n) > buffer_.size() - 1;
    d.payload = absl::string_view(buffer_.data(), d.truncated ? buffer_.size() : static_cast<size_t>(n));
    d.foreign_sender = true;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        d.foreign_sender = cred.uid != getuid();
      }
    }
    fn(d);
  }
}

}  // namespace trainsup
