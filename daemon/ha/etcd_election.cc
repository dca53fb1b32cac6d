#include "daemon/ha/etcd_election.h"

#include <arpa/inet.h>

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/log.h"

namespace trainsup {
namespace {

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

bool IsIpLiteral(const std::string& host, int family) {
  unsigned char buf[16];
  return inet_pton(family, host.c_str(), buf) == 1;
}

// The gRPC target for `endpoints`: "ipv4:A,B,C" (balanced) for addresses,
// the endpoint itself for one name. An https:// endpoint needs `tls`, an
// http:// one refuses it: a scheme that says otherwise is a mistake.
absl::StatusOr<std::string> ChannelTarget(const std::vector<std::string>& endpoints, bool tls) {
  if (endpoints.empty()) return absl::InvalidArgumentError("--etcd-endpoints: none given");
  std::vector<std::string> v4, v6;
  for (std::string e : endpoints) {
    absl::string_view view(e);
    if (absl::ConsumePrefix(&view, "https://") && !tls) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd-endpoints: ", e, " is https: give etcd's CA with --etcd-tls-ca"));
    }
    if (absl::ConsumePrefix(&view, "http://") && tls) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd-endpoints: ", e, " is plain http, but --etcd-tls-ca asks for TLS"));
    }
    e = std::string(view);
    const size_t colon = e.rfind(':');
    if (colon == std::string::npos || colon + 1 == e.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--etcd-endpoints: ", e, " is not HOST:PORT"));
    }
    std::string host = e.substr(0, colon);
    if (IsIpLiteral(host, AF_INET)) {
      v4.push_back(e);
    } else if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]") &&
               IsIpLiteral(host.substr(1, host.size() - 2), AF_INET6)) {
      v6.push_back(e);
    } else if (endpoints.size() == 1) {
      return e;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--etcd-endpoints: ", e, ": give several endpoints as IP addresses (or one name)"));
    }
  }
  if (!v4.empty() && !v6.empty()) {
    return absl::InvalidArgumentError("--etcd-endpoints: all IPv4 or all IPv6");
  }
  return v4.empty() ? absl::StrCat("ipv6:", absl::StrJoin(v6, ","))
                    : absl::StrCat("ipv4:", absl::StrJoin(v4, ","));
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeEtcdChannel(
    const EtcdElectionOptions& options) {
  absl::StatusOr<std::string> target = ChannelTarget(options.endpoints, options.tls.enabled());
  if (!target.ok()) return target.status();
  // The files are read and checked now, with errors that name them.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls, /*token=*/"");
  if (!credentials.ok()) {
    return absl::Status(credentials.status().code(),
                        absl::StrCat("etcd: ", credentials.status().message()));
  }
  grpc::ChannelArguments args;
  args.SetLoadBalancingPolicyName("round_robin");
  // A member back after a restart is used again within a second (gRPC's
  // reconnect backoff grows to 2 minutes by default).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // The shared state is read in pages of up to 16 values of 1 MiB.
  args.SetMaxReceiveMessageSize(64 << 20);
  ApplyServerName(options.tls, &args);
  return grpc::CreateCustomChannel(*target, *credentials, args);
}

absl::StatusOr<std::unique_ptr<EtcdElection>> EtcdElection::Start(
    const EtcdElectionOptions& options, const Clock* clock) {
  if (options.ttl < absl::Seconds(2)) {
    return absl::InvalidArgumentError("--etcd-lease-ttl: etcd grants no lease shorter than 2s");
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = MakeEtcdChannel(options);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<EtcdElection> e(new EtcdElection(options, clock, *std::move(channel)));
  e->keepalive_ = std::thread([p = e.get()] { p->KeepAliveLoop(); });
  e->campaign_ = std::thread([p = e.get()] { p->CampaignLoop(); });
  return e;
}

namespace {
absl::Duration MarginOf(const EtcdElectionOptions& o) {
  if (o.margin > absl::ZeroDuration()) return o.margin;
  return std::max(o.ttl / 10, absl::Milliseconds(100));
}
}  // namespace

EtcdElection::EtcdElection(const EtcdElectionOptions& options, const Clock* clock,
                           std::shared_ptr<grpc::Channel> channel)
    : options_(options),
      clock_(clock),
      name_(options.key_prefix + "leader"),
      lease_stub_(etcdserverpb::Lease::NewStub(channel)),
      election_stub_(v3electionpb::Election::NewStub(channel)),
      kv_stub_(etcdserverpb::KV::NewStub(channel)),
      acting_deadline_(clock),
      leadership_(MarginOf(options)) {}

EtcdElection::~EtcdElection() { Resign(); }

std::chrono::system_clock::time_point EtcdElection::Deadline(absl::Duration d) const {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

ElectionState EtcdElection::Current() const {
  absl::MutexLock lock(&mu_);
  return state_;
}

ElectionState EtcdElection::Await(uint64_t seen, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_.changes != seen;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  return state_;
}

FencingToken EtcdElection::Token() const {
  absl::MutexLock lock(&mu_);
  if (leadership_.epoch() == 0) return {};
  return {my_key_, leadership_.epoch()};
}

absl::Duration EtcdElection::last_renew_latency() const {
  absl::MutexLock lock(&mu_);
  return renew_latency_;
}

void EtcdElection::SyncDeadlineLocked() {
  acting_deadline_.Set(leadership_.role() == Leadership::Role::kLeader
                           ? leadership_.lease_valid_until()
                           : absl::InfinitePast());
}

void EtcdElection::PublishLocked(const std::string& reason, bool force) {
  SyncDeadlineLocked();
  const Leadership::Role role = leadership_.role();
  const int64_t epoch = leadership_.epoch();
  if (!force && role == state_.role && epoch == state_.epoch) return;
  if (role == Leadership::Role::kLeader && state_.role == Leadership::Role::kStandby) {
    ++state_.elections_won;
  }
  state_.role = role;
  state_.epoch = epoch;
  state_.reason = reason;
  ++state_.changes;
}

bool EtcdElection::Pause(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stopping), d);
}

absl::StatusOr<int64_t> EtcdElection::KeepAliveOnce(int64_t lease, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(timeout));
  std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                           etcdserverpb::LeaseKeepAliveResponse>>
      stream = lease_stub_->LeaseKeepAlive(&context);
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  const bool answered = stream->Write(request) && stream->WritesDone() && stream->Read(&response);
  grpc::Status status = stream->Finish();
  if (!answered) {
    return status.ok() ? absl::UnavailableError("keepalive: no answer")
                       : FromGrpc(status, "keepalive");
  }
  return response.ttl();
}

void EtcdElection::LearnLeader() {
  std::string value;
  absl::StatusOr<v3electionpb::LeaderKey> leader = AskLeader(&value);
  if (!leader.ok()) return;
  absl::MutexLock lock(&mu_);
  if (leadership_.role() == Leadership::Role::kLeader) return;
  if (state_.leader != value) {
    TRAINSUP_LOG_INFO("etcd: standby; the leader is %s (epoch %d)", value, leader->rev());
  }
  state_.leader = value;
}

void EtcdElection::KeepAliveLoop() {
  const absl::Duration interval = options_.ttl / 3;
  for (;;) {
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || (lease_ != 0 && !lease_gone_);
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      lease = lease_;
    }
    const absl::Time sent = clock_->Now();
    absl::StatusOr<int64_t> ttl = KeepAliveOnce(lease, interval);
    const absl::Time answered = clock_->Now();
    absl::Time next = answered + absl::Milliseconds(200);  // after a failure
    bool standby = false;
    {
      absl::MutexLock lock(&mu_);
      if (lease == lease_) {
        if (!ttl.ok()) {
          TRAINSUP_LOG_DEBUG("etcd: lease %x not renewed: %s", lease, ttl.status().message());
        } else if (*ttl <= 0) {
          lease_gone_ = true;
          // A campaign on a lease that expired waits in a line its key has
          // left: end it, and campaign again on a new lease.
          if (campaign_call_ != nullptr) campaign_call_->TryCancel();
        } else {
          leadership_.Renewed(sent, absl::Seconds(*ttl));
          SyncDeadlineLocked();
          renew_latency_ = answered - sent;
          ++renewals_;
          TRAINSUP_LOG_DEBUG("etcd: lease %x renewed: TTL %ds, round trip %.1fms", lease, *ttl,
                             absl::ToDoubleMilliseconds(renew_latency_));
          next = sent + interval;
        }
      }
      standby = leadership_.role() != Leadership::Role::kLeader;
    }
    // A standby whose campaign began before anyone led learns who leads
    // here: the campaign call itself says nothing until it ends.
    if (standby && ttl.ok()) LearnLeader();
    if (!Pause(std::max(next - clock_->Now(), absl::ZeroDuration()))) return;
  }
}

absl::Status EtcdElection::GrantLease() {
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.call_timeout));
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(absl::ToInt64Seconds(options_.ttl));
  etcdserverpb::LeaseGrantResponse response;
  const absl::Time sent = clock_->Now();
  grpc::Status s = lease_stub_->LeaseGrant(&context, request, &response);
  if (!s.ok()) return FromGrpc(s, "lease grant");
  if (!response.error().empty()) return absl::UnavailableError(response.error());
  absl::MutexLock lock(&mu_);
  lease_ = response.id();
  lease_gone_ = false;
  leadership_.NewLease(sent, absl::Seconds(response.ttl()));
  SyncDeadlineLocked();
  TRAINSUP_LOG_INFO("etcd: lease %x granted (TTL %ds)", lease_, response.ttl());
  last_warning_.clear();
  return absl::OkStatus();
}

absl::StatusOr<v3electionpb::LeaderKey> EtcdElection::AskLeader(std::string* value) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.call_timeout));
  v3electionpb::LeaderRequest request;
  request.set_name(name_);
  v3electionpb::LeaderResponse response;
  grpc::Status s = election_stub_->Leader(&context, request, &response);
  // etcd says "election: no leader" as an error.
  if (!s.ok() && absl::StrContains(s.error_message(), "no leader")) {
    return absl::NotFoundError("no leader");
  }
  if (!s.ok()) return FromGrpc(s, "election leader");
  v3electionpb::LeaderKey key;
  key.set_name(name_);
  key.set_key(response.kv().key());
  key.set_rev(response.kv().create_revision());
  key.set_lease(response.kv().lease());
  if (value != nullptr) *value = response.kv().value();
  return key;
}

absl::StatusOr<std::vector<EtcdElection::Candidate>> EtcdElection::Candidates() const {
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.call_timeout));
  // Every key under "NAME/": etcd's election keys are NAME/LEASE_ID.
  etcdserverpb::RangeRequest request;
  const std::string prefix = name_ + "/";
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);
  request.set_key(prefix);
  request.set_range_end(end);
  request.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  request.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  etcdserverpb::RangeResponse response;
  grpc::Status s = kv_stub_->Range(&context, request, &response);
  if (!s.ok()) return FromGrpc(s, "election candidates");
  std::vector<Candidate> candidates;
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    candidates.push_back(Candidate{kv.value(), kv.create_revision()});
  }
  return candidates;
}

absl::Status EtcdElection::CampaignOnce(int64_t lease) {
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.campaign_timeout));
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return absl::CancelledError("resigned");
    campaign_call_ = &context;
  }
  v3electionpb::CampaignRequest request;
  request.set_name(name_);
  request.set_lease(lease);
  request.set_value(options_.value);
  v3electionpb::CampaignResponse response;
  grpc::Status s = election_stub_->Campaign(&context, request, &response);
  absl::MutexLock lock(&mu_);
  campaign_call_ = nullptr;
  if (!s.ok()) return FromGrpc(s, "campaign");
  if (lease != lease_ || lease_gone_ || stopping_) {
    return absl::AbortedError("the lease changed while campaigning");
  }
  my_key_ = response.leader().key();
  leadership_.Elected(clock_->Now(), response.leader().rev());
  state_.leader = options_.value;
  PublishLocked(absl::StrCat("won the election (epoch ", response.leader().rev(), ")"), true);
  return absl::OkStatus();
}

void EtcdElection::RevokeLease(int64_t lease) {
  if (lease == 0) return;
  grpc::ClientContext context;
  context.set_deadline(Deadline(std::min(options_.call_timeout, absl::Seconds(1))));
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  grpc::Status s = lease_stub_->LeaseRevoke(&context, request, &response);
  if (!s.ok()) TRAINSUP_LOG_WARN("etcd: revoking lease %x: %s", lease, s.error_message());
}

void EtcdElection::DropLeaseLocked(const std::string& why) {
  const int64_t lease = lease_;
  const bool gone = lease_gone_;
  lease_ = 0;
  lease_gone_ = false;
  my_key_.clear();
  leadership_.Lost();
  PublishLocked(why);
  if (!gone && lease != 0) {
    mu_.Unlock();
    RevokeLease(lease);
    mu_.Lock();
  }
}

void EtcdElection::WatchLeadership() {
  for (;;) {
    const uint64_t renewals = renewals_;
    const absl::Time until = leadership_.lease_valid_until();
    auto changed = [this, renewals]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ || lease_gone_ || renewals_ != renewals;
    };
    if (leadership_.role() == Leadership::Role::kLeader) {
      // Wake at the deadline on the process's clock; the clock passed in is
      // read against it after.
      mu_.AwaitWithTimeout(absl::Condition(&changed),
                           std::max(until - clock_->Now(), absl::ZeroDuration()));
    } else {
      mu_.AwaitWithTimeout(absl::Condition(&changed), absl::Milliseconds(250));
    }
    if (stopping_) return;
    if (lease_gone_) {
      TRAINSUP_LOG_WARN("etcd: lease %x expired: no longer the leader (epoch %d)", lease_,
                        leadership_.epoch());
      DropLeaseLocked("the lease expired");
      return;
    }
    const Leadership::Role before = leadership_.role();
    const absl::Time now = clock_->Now();
    if (leadership_.Update(now) == Leadership::Role::kSuspended &&
        before == Leadership::Role::kLeader) {
      TRAINSUP_LOG_WARN("etcd: lease %x not renewed in time: stopped acting (epoch %d); the "
                        "lease may expire before etcd is reached again", lease_,
                        leadership_.epoch());
      PublishLocked("the lease could not be renewed in time");
    }
    if (leadership_.NeedsVerification()) {
      const std::string mine = my_key_;
      const absl::Time asked = clock_->Now();
      mu_.Unlock();
      std::string value;
      absl::StatusOr<v3electionpb::LeaderKey> leader = AskLeader(&value);
      mu_.Lock();
      if (stopping_) return;
      if (leader.ok() || absl::IsNotFound(leader.status())) {
        const bool leads = leader.ok() && leader->key() == mine;
        if (!leads) state_.leader = leader.ok() ? value : "";
        leadership_.Verified(asked, leads);
        if (leads) {
          TRAINSUP_LOG_INFO("etcd: still the leader after the lease was renewed (epoch %d): "
                            "acting again", leadership_.epoch());
          PublishLocked("the lease was renewed and the election still names this instance");
        } else {
          TRAINSUP_LOG_WARN("etcd: the election no longer names this instance (leader: %s)",
                            value.empty() ? "none" : value);
          DropLeaseLocked("another instance leads");
          return;
        }
      }
    }
  }
}

void EtcdElection::NoteEtcdError(const absl::Status& s) {
  absl::MutexLock lock(&mu_);
  const std::string said(s.message());
  if (said == last_warning_) {
    TRAINSUP_LOG_DEBUG("etcd: %s", said);
    return;
  }
  TRAINSUP_LOG_WARN("etcd at %s: %s (retrying every 500ms; said again only when it changes)",
                    absl::StrJoin(options_.endpoints, ","), said);
  last_warning_ = said;
}

void EtcdElection::CampaignLoop() {
  for (;;) {
    int64_t lease = 0;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      if (lease_gone_) DropLeaseLocked("the lease expired");
      lease = lease_;
    }
    if (lease == 0) {
      if (absl::Status s = GrantLease(); !s.ok()) {
        NoteEtcdError(s);
        if (!Pause(absl::Milliseconds(500))) return;
        continue;
      }
      continue;
    }
    LearnLeader();
    absl::Status s = CampaignOnce(lease);
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    if (s.ok()) {
      TRAINSUP_LOG_INFO("etcd: leader (epoch %d, lease %x)", leadership_.epoch(), lease_);
      WatchLeadership();
      continue;
    }
    if (absl::StrContains(s.message(), "lease not found")) {
      lease_gone_ = true;
      continue;
    }
    if (!absl::IsDeadlineExceeded(s) && !absl::IsCancelled(s)) {
      TRAINSUP_LOG_DEBUG("etcd: %s", s.message());
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
      mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(500));
    }
  }
}

void EtcdElection::Resign() {
  if (resigned_) return;
  resigned_ = true;
  int64_t lease = 0;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (campaign_call_ != nullptr) campaign_call_->TryCancel();
    lease = lease_gone_ ? 0 : lease_;
    lease_ = 0;
    const bool led = leadership_.role() != Leadership::Role::kStandby;
    leadership_.Lost();
    PublishLocked(led ? "resigned" : "stopped campaigning");
  }
  RevokeLease(lease);
  if (keepalive_.joinable()) keepalive_.join();
  if (campaign_.joinable()) campaign_.join();
}

}  // namespace trainsup
