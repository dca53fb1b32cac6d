#ifndef TRAINSUP_AGENT_RANK_SOCKET_H_
#define TRAINSUP_AGENT_RANK_SOCKET_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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

 private:
  RankSocket(int fd, std::string dir, std::string path);

  const int fd_;
  const std::string dir_;
  const std::string path_;
  std::string buffer_;
};

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_RANK_SOCKET_H_
