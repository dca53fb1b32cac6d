#ifndef TRAINSUP_DAEMON_HA_SERVER_H_
#define TRAINSUP_DAEMON_HA_SERVER_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "daemon/ha/election.h"
#include "daemon/ha/etcd_election.h"
#include "daemon/ha/etcd_state_log.h"
#include "daemon/server.h"

namespace trainsup {

struct HaOptions {
  // This instance's name, unique among the instances of one election.
  std::string instance;
  // The gRPC address the election names for this instance, which clients
  // follow to it (--advertise-address): HOST:PORT, or HOST (with the port
  // bound). Default: the address bound (--listen).
  std::string advertise;
  EtcdElectionOptions etcd;  // its `value` is filled in: "NAME ADDRESS"
};

// trainsupd under an election (docs/ha.md): a standby Server (listening,
// refusing every call with the leader's address, deciding nothing) until the
// election names this instance; then it loads the state shared through etcd
// into its store, restores from it and acts (every decision committed to
// etcd, fenced by its leadership, before it is acted on), until
// it cannot be sure it still leads. A suspended leader acts again when the
// election confirms it; one that lost the election for good starts over as a
// fresh standby (its state in memory may be stale by then).
// Thread-safe.
// The address an instance proclaims: `advertise` (HOST:PORT, or HOST with
// the port of `bound`), or `bound` when empty. InvalidArgument for a
// wildcard host (0.0.0.0, [::]: no client can dial it) or a malformed one.
absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise,
                                              const std::string& bound);

// What an HaServer campaigns with: an election, and the state log shared
// through it, whose writes are fenced on the election's token. etcd in
// production (EtcdBackend); a fake in HaServer's tests.
class ElectionBackend {
 public:
  virtual ~ElectionBackend() = default;
  // The shared log; `token` says, when asked, what its writes are fenced on.
  virtual absl::StatusOr<std::unique_ptr<SharedLog>> MakeLog(
      std::function<FencingToken()> token) = 0;
  // Starts campaigning, proclaiming `value` ("NAME ADDRESS").
  virtual absl::StatusOr<std::unique_ptr<Election>> StartElection(const std::string& value,
                                                                  const Clock* clock) = 0;
  // Where the election is held, for the log ("etcd at A,B,C").
  virtual std::string Where() const = 0;
};

// The election and log in etcd (ha.etcd).
std::unique_ptr<ElectionBackend> EtcdBackend(const EtcdElectionOptions& etcd);

class HaServer {
 public:
  // Under the etcd election of `ha.etcd`.
  static absl::StatusOr<std::unique_ptr<HaServer>> Start(const ServerOptions& options,
                                                         const HaOptions& ha,
                                                         const Clock* clock);
  // Under `backend`'s election (ha.etcd is not read).
  static absl::StatusOr<std::unique_ptr<HaServer>> Start(
      const ServerOptions& options, const HaOptions& ha, const Clock* clock,
      std::unique_ptr<ElectionBackend> backend);
  ~HaServer();

  HaServer(const HaServer&) = delete;
  HaServer& operator=(const HaServer&) = delete;

  std::string grpc_address() const;
  std::string metrics_address() const;
  absl::Status ReloadCertificates();
  // Stops acting, resigns (another instance takes over at once), then shuts
  // the server down. Idempotent.
  void Shutdown();

 private:
  HaServer(const ServerOptions& options, const HaOptions& ha, const Clock* clock)
      : options_(options), ha_(ha), clock_(clock) {}
  void Follow();  // the thread that applies the election's state
  // Applies `state` to the server; false when it must be rebuilt.
  bool Apply(const ElectionState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<Server>> StartServer();
  // What `trainsupctl status` says, answered by the leader at `address`.
  v1::SupervisorStatus Status(const std::string& address) const;

  ServerOptions options_;  // the addresses as first bound, once started
  std::string advertised_;  // the gRPC address the election names
  const HaOptions ha_;
  const Clock* const clock_;
  std::unique_ptr<ElectionBackend> backend_;
  // The state shared with the other instances, written fenced by election_;
  // outlives every server.
  std::unique_ptr<SharedLog> shared_log_;
  std::unique_ptr<Election> election_;
  mutable absl::Mutex mu_;
  std::unique_ptr<Server> server_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool led_ ABSL_GUARDED_BY(mu_) = false;  // server_ has acted (its state is its own)
  std::thread follower_;
  // When the current epoch began to act (its own lock: read on gRPC's
  // threads, which a server shut down under mu_ waits for).
  mutable absl::Mutex since_mu_;
  int64_t since_epoch_ ABSL_GUARDED_BY(since_mu_) = 0;
  absl::Time leading_since_ ABSL_GUARDED_BY(since_mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_SERVER_H_
