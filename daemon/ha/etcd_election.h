#ifndef TRAINSUP_DAEMON_HA_ETCD_ELECTION_H_
#define TRAINSUP_DAEMON_HA_ETCD_ELECTION_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/credentials.h"
#include "daemon/ha/acting_deadline.h"
#include "daemon/ha/election.h"
#include "daemon/ha/etcd_state_log.h"
#include "daemon/ha/leadership.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace trainsup {

struct EtcdElectionOptions {
  // etcd's client addresses, HOST:PORT (an http:// or https:// in front is
  // dropped). Several must be IP addresses (gRPC balances over them); one
  // may be a name.
  std::vector<std::string> endpoints;
  // TLS to etcd (--etcd-tls-ca, --etcd-tls-cert, --etcd-tls-key,
  // --etcd-tls-server-name): etcd's CA, and this instance's client
  // certificate when etcd asks for one (--client-cert-auth). Off: plain text.
  ClientTlsOptions tls;
  // The election's keys live under this prefix (one per shard of jobs, when
  // there are shards). Default: "/trainsup/default/".
  std::string key_prefix = "/trainsup/default/";
  // What this instance proclaims when it leads: "NAME ADDRESS".
  std::string value;
  // The lease's TTL; etcd grants no less than 2s. Renewed every ttl/3.
  // Default: 5s.
  absl::Duration ttl = absl::Seconds(5);
  // Stop acting this long before the lease could expire on etcd's clock.
  // Default: ttl/10, at least 100ms.
  absl::Duration margin = absl::ZeroDuration();
  // Deadline of each unary call (grant, leader, revoke). Default: 2s.
  absl::Duration call_timeout = absl::Seconds(2);
  // A campaign waits this long at most before it is asked again (a
  // cancelled one gives its place in line up; the next takes a new one).
  // Default: 60s.
  absl::Duration campaign_timeout = absl::Seconds(60);
};

// A channel to etcd's members of `options` (endpoints, TLS); the files are
// read and checked now.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeEtcdChannel(const EtcdElectionOptions& options);

// Election through etcd's Election service on a lease this instance keeps
// alive (Lease service: grant, keepalive every ttl/3, revoke). It campaigns
// from Start() on, and decides its role with Leadership: a leader whose
// lease renewals stop stops acting before the lease can have expired, and
// leads again only after a renewal and Election.Leader naming its key. A
// lost lease (expired, revoked) means a new lease and a new campaign.
//
// Every call has a deadline. Two threads: one keeps the lease, one
// campaigns and watches. Thread-safe.
class EtcdElection : public Election {
 public:
  // Checks the options and starts campaigning; does not wait for etcd.
  static absl::StatusOr<std::unique_ptr<EtcdElection>> Start(const EtcdElectionOptions& options,
                                                             const Clock* clock);
  ~EtcdElection() override;  // resigns

  EtcdElection(const EtcdElection&) = delete;
  EtcdElection& operator=(const EtcdElection&) = delete;

  ElectionState Current() const override;
  ElectionState Await(uint64_t seen, absl::Duration timeout) const override;
  void Resign() override;

  // What this instance's writes to the shared state are fenced on: its
  // election key and epoch while elected (leading or suspended), else
  // epoch 0.
  FencingToken Token() const override;
  // The last keepalive's round trip (zero before the first).
  absl::Duration last_renew_latency() const override;
  // Until when this instance may act: moved with every renewal while it
  // leads, the infinite past otherwise. Lives as long as the election.
  const ActingDeadline& acting_deadline() const override { return acting_deadline_; }
  // The election's name (its keys' prefix).
  const std::string& election_name() const override { return name_; }

  // The candidates as etcd holds them now, in line (the lowest create
  // revision, the leader, first); one call with the unary deadline.
  absl::StatusOr<std::vector<Candidate>> Candidates() const override;

 private:
  EtcdElection(const EtcdElectionOptions& options, const Clock* clock,
               std::shared_ptr<grpc::Channel> channel);
  void KeepAliveLoop();
  void CampaignLoop();
  // One keepalive round trip: the TTL left (0: the lease is gone), or why not.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t lease, absl::Duration timeout);
  // Grants a lease; sets lease_ and tells leadership_.
  absl::Status GrantLease();
  // Campaigns on the current lease until it wins, the campaign times out, or
  // Resign() cancels it. On a win: elected.
  absl::Status CampaignOnce(int64_t lease);
  // Who leads now: their key and proclaimed value (NotFound: no one).
  absl::StatusOr<v3electionpb::LeaderKey> AskLeader(std::string* value);
  // Watches an elected instance until it loses (or stops).
  void WatchLeadership() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the lease (revoked best effort: a lease this instance gives up
  // must not hold its key in line).
  void DropLeaseLocked(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RevokeLease(int64_t lease);
  // Publishes leadership_'s role if it changed (or `force`).
  void PublishLocked(const std::string& reason, bool force = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // acting_deadline_ from leadership_: its lease's deadline while it leads.
  void SyncDeadlineLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks etcd who leads and keeps it in state_.leader (a standby's refusals
  // name it), unless this instance leads.
  void LearnLeader() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `d` (or until stopping); false when stopping.
  bool Pause(absl::Duration d) ABSL_LOCKS_EXCLUDED(mu_);
  // Logs a failed call to etcd: a warning when it fails differently from
  // the last warning (etcd down, a certificate refused), else a debug line,
  // so that a retry every 500ms does not flood the log.
  void NoteEtcdError(const absl::Status& s) ABSL_LOCKS_EXCLUDED(mu_);
  std::chrono::system_clock::time_point Deadline(absl::Duration d) const;

  const EtcdElectionOptions options_;
  const Clock* const clock_;
  const std::string name_;  // the election's name: key_prefix + "leader"
  std::unique_ptr<etcdserverpb::Lease::Stub> lease_stub_;
  std::unique_ptr<v3electionpb::Election::Stub> election_stub_;
  std::unique_ptr<etcdserverpb::KV::Stub> kv_stub_;

  ActingDeadline acting_deadline_;
  mutable absl::Mutex mu_;
  Leadership leadership_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;  // 0: none
  bool lease_gone_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t renewals_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration renew_latency_ ABSL_GUARDED_BY(mu_);
  std::string my_key_ ABSL_GUARDED_BY(mu_);
  ElectionState state_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* campaign_call_ ABSL_GUARDED_BY(mu_) = nullptr;  // to cancel it
  std::string last_warning_ ABSL_GUARDED_BY(mu_);  // NoteEtcdError's; "" after a success
  bool resigned_ = false;  // Resign()'s own
  std::thread keepalive_;
  std::thread campaign_;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_HA_ETCD_ELECTION_H_
