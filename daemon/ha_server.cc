#include "daemon/ha_server.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "common/options.h"
#include "common/supervisor_addresses.h"
#include "daemon/metric_family.h"
#include "daemon/operator_snapshot.h"
#include "prometheus/collectable.h"

namespace trainsup {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

// The name and the address in what an instance proclaims, "NAME ADDRESS"
// (the address "" when there is none).
std::pair<std::string, std::string> Proclaimed(const std::string& value) {
  const size_t space = value.rfind(' ');
  if (space == std::string::npos) return {value, ""};
  return {value.substr(0, space), value.substr(space + 1)};
}

std::string LeaderAddress(const std::string& leader) { return Proclaimed(leader).second; }

// trainsup_leader and the election's figures, read at scrape time.
class LeaderCollector : public prometheus::Collectable {
 public:
  LeaderCollector(const Election* election, const SharedLog* log, const Server* server)
      : election_(election), log_(log), server_(server) {}

  std::vector<MetricFamily> Collect() const override {
    const ElectionState state = election_->Current();
    const SharedLog::Counts log = log_->counts();
    MetricFamily leader = Family(
        "trainsup_leader",
        "1 while this trainsupd leads and acts, 0 as a standby or while it cannot be sure it "
        "still leads (docs/ha.md).",
        MetricType::Gauge);
    AddSample(leader, {}, server_->acting() ? 1 : 0);
    MetricFamily epoch = Family(
        "trainsup_leader_epoch",
        "The election key's revision while this trainsupd is elected (the fencing token), else 0.",
        MetricType::Gauge);
    AddSample(epoch, {}, static_cast<double>(state.epoch));
    MetricFamily won = Family("trainsup_leader_elections_won_total",
                              "Elections this trainsupd won.", MetricType::Counter);
    AddSample(won, {}, static_cast<double>(state.elections_won));
    MetricFamily changes = Family(
        "trainsup_leader_changes_total",
        "Changes of this trainsupd's role (standby, leader, suspended).", MetricType::Counter);
    AddSample(changes, {}, static_cast<double>(state.changes));
    MetricFamily renew = Family("trainsup_etcd_lease_renew_seconds",
                                "Round trip of the last renewal of the election lease.",
                                MetricType::Gauge);
    AddSample(renew, {}, absl::ToDoubleSeconds(election_->last_renew_latency()));
    MetricFamily refused = Family(
        "trainsup_fenced_writes_refused_total",
        "Writes to the shared state refused because this trainsupd no longer held its "
        "leadership (etcd's compare on its election key failed, or it was no longer elected); "
        "none was acted on.",
        MetricType::Counter);
    AddSample(refused, {}, static_cast<double>(log.refused));
    MetricFamily written = Family("trainsup_etcd_state_writes_total",
                                  "Journals committed to the shared state in etcd.",
                                  MetricType::Counter);
    AddSample(written, {}, static_cast<double>(log.appended));
    MetricFamily failed = Family(
        "trainsup_etcd_state_write_failures_total",
        "Writes to the shared state etcd did not answer (retried while still elected).",
        MetricType::Counter);
    AddSample(failed, {}, static_cast<double>(log.unavailable));
    MetricFamily compactions = Family("trainsup_etcd_state_compactions_total",
                                      "Compactions of the shared state's log into a snapshot.",
                                      MetricType::Counter);
    AddSample(compactions, {}, static_cast<double>(log.compactions));
    return {std::move(leader),  std::move(epoch),  std::move(won),         std::move(changes),
            std::move(renew),   std::move(refused), std::move(written),    std::move(failed),
            std::move(compactions)};
  }

 private:
  const Election* const election_;
  const SharedLog* const log_;
  const Server* const server_;
};

class EtcdElectionBackend : public ElectionBackend {
 public:
  explicit EtcdElectionBackend(const EtcdElectionOptions& etcd) : etcd_(etcd) {}

  absl::StatusOr<std::unique_ptr<SharedLog>> MakeLog(
      std::function<FencingToken()> token) override {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeEtcdChannel(etcd_);
    if (!channel.ok()) return channel.status();
    EtcdStateLog::Options options;
    options.key_prefix = etcd_.key_prefix;
    options.call_timeout = etcd_.call_timeout;
    return std::make_unique<EtcdStateLog>(*std::move(channel), options, std::move(token));
  }
  absl::StatusOr<std::unique_ptr<Election>> StartElection(const std::string& value,
                                                          const Clock* clock) override {
    EtcdElectionOptions etcd = etcd_;
    etcd.value = value;
    absl::StatusOr<std::unique_ptr<EtcdElection>> election = EtcdElection::Start(etcd, clock);
    if (!election.ok()) return election.status();
    return std::unique_ptr<Election>(*std::move(election));
  }
  std::string Where() const override {
    return absl::StrCat("etcd at ", absl::StrJoin(etcd_.endpoints, ","));
  }

 private:
  const EtcdElectionOptions etcd_;
};

}  // namespace

std::unique_ptr<ElectionBackend> EtcdBackend(const EtcdElectionOptions& etcd) {
  return std::make_unique<EtcdElectionBackend>(etcd);
}

absl::StatusOr<std::string> AdvertisedAddress(const std::string& advertise,
                                              const std::string& bound) {
  if (advertise.empty()) return bound;
  std::string address = advertise;
  // HOST alone (a name, an IPv4 address or a bracketed IPv6 one): the port bound.
  const bool has_port = CheckHostPort(advertise).ok();
  const bool bare_host = !absl::StrContains(advertise, ':') ||
                         (absl::StartsWith(advertise, "[") && absl::EndsWith(advertise, "]"));
  if (!has_port) address = absl::StrCat(advertise, ":", bound.substr(bound.rfind(':') + 1));
  if (absl::Status s = CheckHostPort(address); !s.ok() || (!has_port && !bare_host)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--advertise-address ", advertise, ": give HOST or HOST:PORT"));
  }
  if (IsWildcardHost(address) || absl::EndsWith(address, ":0")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--advertise-address ", advertise, ": give an address clients can dial"));
  }
  return address;
}

absl::StatusOr<std::unique_ptr<Server>> HaServer::StartServer() {
  ServerOptions options = options_;
  options.standby = true;
  options.shared_log = shared_log_.get();
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options, clock_);
  if (!server.ok()) return server;
  // Served only while leading (a standby refuses every call), by then
  // election_ is set.
  (*server)->SetStatusSource([this] { return Status(advertised_); });
  return server;
}

v1::SupervisorStatus HaServer::Status(const std::string& address) const {
  v1::SupervisorStatus status;
  status.set_elected(true);
  status.set_instance(ha_.instance);
  status.set_address(address);
  status.set_epoch(election_->Current().epoch);
  status.set_election(election_->election_name());
  {
    absl::MutexLock lock(&since_mu_);
    SetTimestamp(leading_since_, status.mutable_leading_since());
  }
  absl::StatusOr<std::vector<Election::Candidate>> candidates = election_->Candidates();
  if (!candidates.ok()) {
    status.set_candidates_error(std::string(candidates.status().message()));
    return status;
  }
  for (const Election::Candidate& c : *candidates) {
    v1::SupervisorInstance* instance = status.add_instances();
    auto [name, address] = Proclaimed(c.value);
    instance->set_name(std::move(name));
    instance->set_address(std::move(address));
    instance->set_leader(status.instances_size() == 1);
    instance->set_create_revision(c.create_revision);
  }
  return status;
}

absl::StatusOr<std::unique_ptr<HaServer>> HaServer::Start(const ServerOptions& options,
                                                          const HaOptions& ha,
                                                          const Clock* clock) {
  return Start(options, ha, clock, EtcdBackend(ha.etcd));
}

absl::StatusOr<std::unique_ptr<HaServer>> HaServer::Start(
    const ServerOptions& options, const HaOptions& ha, const Clock* clock,
    std::unique_ptr<ElectionBackend> backend) {
  if (ha.instance.empty()) return absl::InvalidArgumentError("--instance: empty");
  std::unique_ptr<HaServer> s(new HaServer(options, ha, clock));
  s->backend_ = std::move(backend);
  // Written only while leading, when election_ is set.
  absl::StatusOr<std::unique_ptr<SharedLog>> log = s->backend_->MakeLog([p = s.get()] {
    return p->election_ == nullptr ? FencingToken{} : p->election_->Token();
  });
  if (!log.ok()) return log.status();
  s->shared_log_ = *std::move(log);
  absl::StatusOr<std::unique_ptr<Server>> server = s->StartServer();
  if (!server.ok()) return server.status();
  // A server started again (after a lost election) binds the same ports.
  s->options_.listen = (*server)->grpc_address();
  if (!options.metrics_listen.empty()) s->options_.metrics_listen = (*server)->metrics_address();
  absl::StatusOr<std::string> advertised = AdvertisedAddress(ha.advertise, s->options_.listen);
  if (!advertised.ok()) return advertised.status();
  s->advertised_ = *std::move(advertised);
  if (IsWildcardHost(s->advertised_)) {
    TRAINSUP_LOG_WARN("the election names this instance %s, which clients cannot dial to "
                      "follow it: give --advertise-address", s->advertised_);
  }
  absl::StatusOr<std::unique_ptr<Election>> election =
      s->backend_->StartElection(absl::StrCat(ha.instance, " ", s->advertised_), clock);
  if (!election.ok()) return election.status();
  (*server)->AddCollectable(
      std::make_shared<LeaderCollector>(election->get(), s->shared_log_.get(), server->get()));
  s->election_ = *std::move(election);
  {
    absl::MutexLock lock(&s->mu_);
    s->server_ = *std::move(server);
  }
  TRAINSUP_LOG_INFO("standby as %s: campaigning in election %s of %s", ha.instance,
                    s->election_->election_name(), s->backend_->Where());
  s->follower_ = std::thread([p = s.get()] { p->Follow(); });
  return s;
}

HaServer::~HaServer() { Shutdown(); }

std::string HaServer::grpc_address() const {
  absl::MutexLock lock(&mu_);
  return server_ == nullptr ? "" : server_->grpc_address();
}

std::string HaServer::metrics_address() const {
  absl::MutexLock lock(&mu_);
  return server_ == nullptr ? "" : server_->metrics_address();
}

absl::Status HaServer::ReloadCertificates() {
  absl::MutexLock lock(&mu_);
  if (server_ == nullptr) return absl::UnavailableError("no server");
  return server_->ReloadCertificates();
}

bool HaServer::Apply(const ElectionState& state) {
  const std::string leader = state.leader.empty() ? "unknown" : state.leader;
  switch (state.role) {
    case Leadership::Role::kLeader:
      if (absl::Status s = server_->Lead(&election_->acting_deadline()); !s.ok()) {
        // The state store cannot be read: do not lead without it.
        TRAINSUP_LOG_ERROR("elected, but cannot restore the state store: %s; resigning",
                           s.message());
        election_->Resign();
        return true;
      }
      led_ = true;
      {
        absl::MutexLock lock(&since_mu_);
        if (since_epoch_ != state.epoch) {
          since_epoch_ = state.epoch;
          leading_since_ = clock_->Now();
        }
      }
      TRAINSUP_LOG_INFO("leading (epoch %d): %s; acting", state.epoch, state.reason);
      server_->host().LeadershipChanged("leader", state.epoch, state.reason);
      return true;
    case Leadership::Role::kSuspended:
      server_->StandBy(absl::StrCat("suspended: this trainsupd (epoch ", state.epoch,
                                    ") cannot reach etcd to renew its leadership; retry"));
      TRAINSUP_LOG_WARN("stopped acting (epoch %d): %s", state.epoch, state.reason);
      if (led_) server_->host().LeadershipChanged("suspended", state.epoch, state.reason);
      return true;
    case Leadership::Role::kStandby:
      server_->StandBy(absl::StrCat("standby: the leader is ", leader),
                       LeaderAddress(state.leader));
      if (led_) {
        TRAINSUP_LOG_WARN("no longer the leader: %s; starting over as a standby", state.reason);
        server_->host().LeadershipChanged("standby", 0, state.reason);
        return false;
      }
      return true;
  }
  return true;
}

void HaServer::Follow() {
  uint64_t seen = 0;
  for (;;) {
    const ElectionState state = election_->Await(seen, absl::Milliseconds(500));
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (state.changes == seen) {
      // A standby's refusal names the leader as the election learns it.
      if (state.role == Leadership::Role::kStandby && !state.leader.empty()) {
        server_->StandBy(absl::StrCat("standby: the leader is ", state.leader),
                         LeaderAddress(state.leader));
      }
      continue;
    }
    seen = state.changes;
    if (Apply(state)) continue;
    // Lost for good: the core's state may be stale (another instance acted
    // since). A fresh server reads the store again when it next leads.
    server_->Shutdown();
    server_.reset();
    led_ = false;
    for (int attempt = 1; !stopping_; ++attempt) {
      absl::StatusOr<std::unique_ptr<Server>> fresh = StartServer();
      if (fresh.ok()) {
        server_ = *std::move(fresh);
        server_->AddCollectable(
            std::make_shared<LeaderCollector>(election_.get(), shared_log_.get(), server_.get()));
        break;
      }
      TRAINSUP_LOG_ERROR("restarting as a standby (attempt %d): %s", attempt,
                         fresh.status().message());
      mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Seconds(1));
    }
    seen = 0;  // apply the current state to the fresh server
  }
}

void HaServer::Shutdown() {
  std::unique_ptr<Server> server;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    if (server_ != nullptr) {
      server_->StandBy("shutting down");
      if (led_) server_->host().LeadershipChanged("standby", 0, "resigned: shutting down");
    }
    server = std::move(server_);
  }
  // The resignation's own record is shared while this instance still holds
  // the election: after Resign etcd would refuse it as a deposed leader's
  // (an error line, "fenced", on every graceful stop).
  if (server != nullptr) server->host().FlushWrites();
  // Not acting any more: hand over at once.
  if (election_ != nullptr) election_->Resign();
  if (follower_.joinable()) follower_.join();
  if (server != nullptr) server->Shutdown();
}

}  // namespace trainsup
