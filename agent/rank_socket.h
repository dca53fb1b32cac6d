#ifndef TRAINSUP_AGENT_RANK_SOCKET_H_
#define TRAINSUP_AGENT_RANK_SOCKET_H_

#include <sys/types.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainsup {

// The node-local unix datagram socket the ranks send heartbeats to. It lives
// in a private directory (mode 0700) made for this agent, and accepts only
// datagrams whose sender runs as the agent's own uid (checked with
// SCM_CREDENTIALS). The agent keeps its other files for the ranks there
// (the plan file; the ranks write their stack files there). Removes the
// directory and every file in it when destroyed. Not thread-safe.
class RankSocket {
 public:
  // Creates "<parent>/trainsup-agent.XXXXXX/rank.sock". `parent` defaults to
  // $XDG_RUNTIME_DIR, else /tmp.
  static absl::StatusOr<std::unique_ptr<RankSocket>> Open(std::string parent = "");
  ~RankSocket();

  RankSocket(const RankSocket&) = delete;
  RankSocket& operator=(const RankSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& directory() const { return dir_; }

  // What one datagram turned out to be.
  struct Datagram {
    absl::string_view payload;  // valid until the next call
    bool truncated = false;     // larger than the receive buffer
    bool foreign_sender = false;  // another uid, or no credentials
  };
  // Reads every datagram queued now (non-blocking) and calls `fn` for each.
  // Returns how many were read.
  int DrainAvailable(const std::function<void(const Datagram&)>& fn);

  // The most datagrams the kernel queues on a unix datagram socket
  // (net.unix.max_dgram_qlen, +1: the check is "more than"); 11 when it
  // cannot be read (the kernel's default of 10).
  static int QueueCapacity();

 private:
  RankSocket(int fd, std::string dir, std::string path);

  const int fd_;
  const std::string dir_;
  const std::string path_;
  std::string buffer_;
};

// When the agent reads the rank socket. A reader blocked on the socket is
// woken by every datagram, and the kernel charges that wakeup (10-17 us on a
// virtual machine) to the sending rank. So while ranks send, the agent does
// not wait on the socket: it drains it every `interval` (a heartbeat reaches
// the agent at most that much later). Once no datagram came for `quiet`, it
// waits on the socket again, so that an agent with no rank sending sleeps
// until the first datagram. Between drains the socket queues at most
// net.unix.max_dgram_qlen datagrams (+1); the helper keeps a refused one
// pending and counts the ones it gives up on (docs/heartbeats.md). Pure: the
// caller passes the time.
class DrainSchedule {
 public:
  // A zero `interval`: always wait on the socket.
  DrainSchedule(absl::Duration interval, absl::Duration quiet)
      : interval_(interval), quiet_(quiet) {}

  // Whether to wait on the socket's readiness now (else: drain on time).
  bool WaitOnSocket(absl::Duration now) const {
    return interval_ <= absl::ZeroDuration() || now - last_datagram_ >= quiet_;
  }
  // How long the loop may sleep before the next drain is due; only
  // meaningful while !WaitOnSocket(now).
  absl::Duration UntilDrain(absl::Duration now) const {
    return std::max(absl::ZeroDuration(), next_drain_ - now);
  }
  // Whether to drain now, given whether poll said the socket is readable
  // (only asked for while waiting on it).
  bool DrainDue(absl::Duration now, bool readable) const {
    return WaitOnSocket(now) ? readable : now >= next_drain_;
  }
  // A drain at `now` read `count` datagrams.
  void Drained(absl::Duration now, int count) {
    if (count > 0) last_datagram_ = now;
    next_drain_ = now + interval_;
  }

 private:
  const absl::Duration interval_;
  const absl::Duration quiet_;
  absl::Duration last_datagram_ = -absl::InfiniteDuration();
  absl::Duration next_drain_ = absl::ZeroDuration();
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_RANK_SOCKET_H_
