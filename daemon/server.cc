#include "daemon/server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/credentials.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/options.h"
#include "daemon/fence_runner.h"
#include "daemon/grpc_log.h"
#include "daemon/listen_check.h"
#include "daemon/shared_journal_sink.h"
#include "daemon/operator_snapshot.h"
#include "daemon/state_store.h"
#include "prometheus/exposer.h"

namespace trainsup {
namespace {

std::string HostOf(const std::string& host_port) { return host_port.substr(0, host_port.rfind(':')); }

// The port of a HOST:PORT that CheckHostPort accepted.
int PortOf(const std::string& host_port) {
  int port = 0;
  return absl::SimpleAtoi(host_port.substr(host_port.rfind(':') + 1), &port) ? port : 0;
}

// `status` with its message after `what`: "cannot listen on X: X: address in
// use" reads badly, so a message that begins with the address keeps it once.
absl::Status Annotated(const absl::Status& status, absl::string_view what,
                       const std::string& address) {
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, address + ": ");
  return absl::Status(status.code(), absl::StrCat(what, address, ": ", message));
}

// Why the SQLite state store cannot be opened at `path`, said before SQLite
// tries (its errors name the last file it probed, not the directory that
// is the trouble); OK when it looks writable.
absl::Status CheckStatePath(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory ", dir, " of --state ", path, ": ", std::strerror(errno),
        " (create it, or give --state another path)"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory ", dir, " of --state ", path, " is not a directory"));
  }
  // SQLite creates the database and its -wal and -shm files beside it.
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "state directory ", dir, " is not writable (", std::strerror(errno), "): trainsupd "
        "keeps ", path, " and its -wal and -shm files there; give this user write access or "
        "--state another path"));
  }
  if (access(path.c_str(), F_OK) == 0 && access(path.c_str(), R_OK | W_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("state database ", path, " is not writable (", std::strerror(errno), ")"));
  }
  return absl::OkStatus();
}

// The access policy the options ask for, or why they are unsafe to serve.
// Logs what a reader of the start-up lines should know.
absl::StatusOr<std::unique_ptr<AccessControl>> MakeAccessControl(const ServerOptions& options) {
  const ServerTlsOptions& tls = options.tls;
  if (tls.mutual() && !tls.enabled()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  std::string token;
  if (!options.operator_token_file.empty()) {
    if (!tls.enabled()) {
      return absl::InvalidArgumentError(
          "--operator-token-file needs --tls-cert and --tls-key: a bearer token must not cross "
          "the network in clear");
    }
    absl::StatusOr<std::string> read = ReadTokenFile(options.operator_token_file);
    if (!read.ok()) return read.status();
    token = *std::move(read);
  }
  const bool loopback = IsLoopbackListen(options.listen);
  if (!tls.enabled() && !loopback) {
    if (!options.insecure) {
      return absl::InvalidArgumentError(absl::StrCat(
          "refusing to serve plain text on ", options.listen,
          ": anyone who reaches it could quarantine nodes and stop jobs. Give --tls-cert and "
          "--tls-key (and --tls-client-ca for agents; README \"Across machines\"), listen on "
          "127.0.0.1, or pass --insecure"));
    }
    TRAINSUP_LOG_WARN("--insecure: serving plain text on %s; anyone who reaches it may "
                      "quarantine nodes, stop and resume jobs", options.listen);
  }
  const bool authenticate = tls.mutual() || !token.empty();
  if (tls.enabled() && !authenticate) {
    TRAINSUP_LOG_WARN("TLS without client authentication: anyone who reaches %s may change "
                      "things; set --tls-client-ca or --operator-token-file", options.listen);
  } else if (authenticate && !tls.mutual()) {
    TRAINSUP_LOG_WARN("no --tls-client-ca: agents cannot prove their node, and their hellos "
                      "are taken on trust");
  }
  AccessPolicy::Options policy;
  policy.authenticate = authenticate;
  policy.agents_need_certificate = tls.mutual();
  return std::make_unique<AccessControl>(AccessPolicy(policy), std::move(token));
}

// The core's options, with what it needs to know of the driver: whether an
// unquarantine has an unfence command to run.
SupervisorOptions CoreOptions(const ServerOptions& options) {
  SupervisorOptions core = options.core;
  core.unfence = !options.unfence_command.empty();
  return core;
}

}  // namespace

Server::Server(const ServerOptions& options, const Clock* clock, std::unique_ptr<StateStore> store,
               std::unique_ptr<AccessControl> access)
    : store_(std::move(store)),
      shared_log_(options.shared_log),
      shared_sink_(shared_log_ == nullptr
                       ? nullptr
                       : std::make_unique<SharedJournalSink>(
                             store_.get(), shared_log_,
                             [this](const std::string& why) {
                               gate_.Close(absl::StartsWith(why, "fenced") ? why
                                                                           : "fenced: " + why);
                             })),
      access_(std::move(access)),
      host_(CoreOptions(options), clock, store_.get(), shared_sink_.get()),
      stream_limits_(options.streams),
      collector_(std::make_shared<SupervisorCollector>(&host_, options.metrics, &stream_stats_)),
      descriptor_collector_(std::make_shared<DescriptorCollector>(options.streams.max_streams,
                                                                  &listener_restarts_)),
      sweep_interval_(options.sweep_interval),
      history_retention_(options.history_retention),
      started_(clock->Now()) {}

void Server::PruneHistory() {
  const absl::Time now = host_.clock().Now();
  if (store_ == nullptr || now - pruned_at_ < absl::Hours(1)) return;
  pruned_at_ = now;
  if (absl::Status s = store_->Prune(now - history_retention_); !s.ok()) {
    TRAINSUP_LOG_ERROR("pruning the state store's history failed: %s", s.message());
  }
}

void Server::SweepLoop() {
  absl::MutexLock lock(&stop_mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_) { return stopping_; };
  while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stopping), sweep_interval_)) {
    stop_mu_.Unlock();
    if (gate_.acting()) host_.Sweep();
    PruneHistory();
    stop_mu_.Lock();
  }
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

struct Server::Listener {
  explicit Listener(Server* s)
      : agents(&s->host_, s->access_.get(), s->stream_limits_, &s->stream_stats_),
        operators(&s->host_, s->access_.get(), [s] { return s->SupervisorStatusNow(); }) {}
  AgentServiceImpl agents;
  OperatorServiceImpl operators;
  std::unique_ptr<grpc::Server> server;  // last: stopped before the services go
};

std::unique_ptr<Server::Listener> Server::BuildListener(const std::string& address, int* port) {
  auto listener = std::make_unique<Listener>(this);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address,
                           certificates_ != nullptr ? certificates_->credentials()
                                                    : grpc::InsecureServerCredentials(),
                           port);
  builder.RegisterService(&listener->agents);
  builder.RegisterService(&listener->operators);
  // Agents keep their stream alive with pings; allow them (gRPC refuses pings
  // more often than every 5 minutes by default and would drop the stream).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // And ping them: a host that lost power closes nothing, and its stream
  // would look open until TCP gives up (minutes to hours). The node-loss
  // rule notices the silence sooner; this frees the stream.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  // Descriptors: a connection that has not finished its TLS and HTTP/2
  // handshake in 10s is closed (gRPC's default is 120s: clients that gave up
  // and retried under load piled up half-open connections), and so is one
  // that carried no call for a minute (an agent's stream never idles; a
  // client told GOAWAY reconnects when it next calls).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 60'000);
  // Memory per connection: 12,500 agents each send a few KiB a second.
  // gRPC's TCP reads may grow to 4 MiB chunks and its HTTP/2 windows follow
  // a bandwidth-delay probe; neither helps small periodic reports.
  builder.AddChannelArgument(GRPC_ARG_TCP_READ_CHUNK_SIZE, 4096);
  builder.AddChannelArgument(GRPC_ARG_TCP_MAX_READ_CHUNK_SIZE, 64 * 1024);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  // One supervisor per port: gRPC sets SO_REUSEPORT by default, and a second
  // trainsupd on a taken port would start and take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  listener->server = builder.BuildAndStart();
  if (listener->server == nullptr) return nullptr;
  return listener;
}

void Server::ListenerLoop() {
  uint64_t seen = GrpcAcceptFailures();
  absl::MutexLock lock(&stop_mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_) { return stopping_; };
  while (!stop_mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Milliseconds(250))) {
    if (GrpcAcceptFailures() == seen) continue;
    stop_mu_.Unlock();
    const int64_t open = OpenDescriptors();
    TRAINSUP_LOG_ERROR("gRPC stopped accepting connections on %s (descriptors open: %s of %d); "
                       "rebuilding the listener: open streams end and agents reconnect",
                       grpc_address_, open < 0 ? "all" : absl::StrCat(open),
                       DescriptorSoftLimit());
    std::unique_ptr<Listener> old;
    {
      absl::MutexLock listener_lock(&listener_mu_);
      old = std::move(listener_);
    }
    if (old != nullptr) {
      old->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      old->server->Wait();
      old.reset();
    }
    seen = GrpcAcceptFailures();  // the old listener's are behind us
    RebuildListener();
    stop_mu_.Lock();
  }
}

void Server::RebuildListener() {
  for (int attempt = 1;; ++attempt) {
    int port = 0;
    std::unique_ptr<Listener> fresh = BuildListener(grpc_address_, &port);
    if (fresh != nullptr && port != 0) {
      absl::MutexLock lock(&listener_mu_);
      listener_ = std::move(fresh);
      listener_restarts_.fetch_add(1);
      TRAINSUP_LOG_INFO("listening again on %s (%d descriptors open); listener restarts: %d",
                        grpc_address_, OpenDescriptors(), listener_restarts_.load());
      return;
    }
    TRAINSUP_LOG_ERROR("cannot listen on %s again (attempt %d, %d descriptors open); retrying "
                       "in 1s", grpc_address_, attempt, OpenDescriptors());
    absl::MutexLock lock(&stop_mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(stop_mu_) { return stopping_; };
    if (stop_mu_.AwaitWithTimeout(absl::Condition(&stopping), absl::Seconds(1))) return;
  }
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      const Clock* clock) {
  // The addresses first: a second trainsupd started by mistake says so
  // before it touches the state store.
  if (absl::Status s = CheckHostPort(options.listen); !s.ok()) return s;
  if (absl::Status s = CheckCanListen(options.listen); !s.ok()) {
    return Annotated(s, "cannot listen on ", options.listen);
  }
  if (!options.metrics_listen.empty()) {
    if (absl::Status s = CheckHostPort(options.metrics_listen); !s.ok()) return s;
    if (absl::Status s = CheckCanListen(options.metrics_listen); !s.ok()) {
      return Annotated(s, "cannot serve metrics on ", options.metrics_listen);
    }
  }
  absl::StatusOr<std::unique_ptr<AccessControl>> access = MakeAccessControl(options);
  if (!access.ok()) return access.status();
  std::unique_ptr<ServerCertificates> certificates;
  if (options.tls.enabled()) {
    absl::StatusOr<std::unique_ptr<ServerCertificates>> created =
        ServerCertificates::Create(options.tls);
    if (!created.ok()) return created.status();
    certificates = *std::move(created);
  }
  std::unique_ptr<StateStore> store;
  if (!options.state_path.empty()) {
    if (absl::Status s = CheckStatePath(options.state_path); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<StateStore>> opened = StateStore::Open(options.state_path);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  } else if (options.shared_log != nullptr) {
    absl::StatusOr<std::unique_ptr<StateStore>> opened = StateStore::OpenInMemory();
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  }
  std::unique_ptr<Server> server(
      new Server(options, clock, std::move(store), *std::move(access)));
  server->certificates_ = std::move(certificates);
  server->security_collector_ = std::make_shared<SecurityCollector>(
      server->access_.get(), !options.tls.enabled() && !IsLoopbackListen(options.listen));
  if (!options.fence_command.empty() || !options.unfence_command.empty()) {
    SupervisorHost* host = &server->host_;
    server->fence_ = std::make_unique<FenceRunner>(
        FenceRunner::Commands{options.fence_command, options.unfence_command},
        options.fence_timeout,
        [host](const FenceRequest& request, bool ok, const std::string& detail) {
          host->FenceDone(request, ok, detail);
        });
    server->host_.set_fence_runner(server->fence_.get());
  }
  server->access_->set_gate(&server->gate_);
  if (options.standby) {
    server->gate_.Close("standby: no leader elected yet");
  } else if (absl::Status s = server->Lead(); !s.ok()) {
    return s;
  }

  int port = 0;
  std::unique_ptr<Listener> listener = server->BuildListener(options.listen, &port);
  if (listener == nullptr || port == 0) {
    // Taken since the check above, most likely; gRPC logged its reason.
    absl::Status why = CheckCanListen(options.listen);
    if (why.ok()) why = absl::UnavailableError("gRPC could not bind it (its log line says why)");
    return Annotated(why, "cannot listen on ", options.listen);
  }
  if (const int asked = PortOf(options.listen); asked != 0 && port != asked) {
    return absl::InternalError(absl::StrCat("asked gRPC to listen on ", options.listen,
                                            " and it bound port ", port));
  }
  {
    absl::MutexLock lock(&server->listener_mu_);
    server->listener_ = std::move(listener);
  }
  server->grpc_address_ = absl::StrCat(HostOf(options.listen), ":", port);

  if (!options.metrics_listen.empty()) {
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      // civetweb says only "null context when constructing CivetServer".
      absl::Status why = CheckCanListen(options.metrics_listen);
      if (why.ok()) why = absl::UnavailableError(e.what());
      return Annotated(why, "cannot serve metrics on ", options.metrics_listen);
    }
    server->exposer_->RegisterCollectable(server->collector_);
    server->exposer_->RegisterCollectable(server->security_collector_);
    server->exposer_->RegisterCollectable(server->descriptor_collector_);
    std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_address_ =
        absl::StrCat(HostOf(options.metrics_listen), ":", ports.empty() ? 0 : ports.front());
  }
  if (server->certificates_ != nullptr) {
    TRAINSUP_LOG_INFO("TLS%s on %s: %s", options.tls.mutual() ? " (mutual)" : "",
                      server->grpc_address_, server->certificates_->summary());
  }
  server->sweeper_ = std::thread([s = server.get()] { s->SweepLoop(); });
  server->listener_watcher_ = std::thread([s = server.get()] { s->ListenerLoop(); });
  return server;
}

absl::Status Server::Lead(const ActingDeadline* deadline) {
  {
    absl::MutexLock lock(&lead_mu_);
    if (!restored_) {
      // The store as the shared state has it, before anything is restored.
      if (shared_log_ != nullptr) {
        if (absl::Status s = LoadSharedState(shared_log_, store_.get()); !s.ok()) return s;
      }
      // After the fence runner: the fences the store kept as pending run again.
      if (absl::Status s = host_.Restore(); !s.ok()) return s;
      restored_ = true;
    }
  }
  gate_.Open(deadline);
  return absl::OkStatus();
}

void Server::StandBy(std::string why, std::string leader) {
  gate_.Close(std::move(why), std::move(leader));
  // The next Lead() starts over from the committed state, as a new leader
  // would: while standing by this instance heard no agent, so what its
  // core last heard is stale (a node would read as lost for the silence
  // this instance made).
  absl::MutexLock lock(&lead_mu_);
  restored_ = false;
}

void Server::SetStatusSource(StatusSource source) {
  absl::MutexLock lock(&status_mu_);
  status_source_ = std::move(source);
}

v1::SupervisorStatus Server::SupervisorStatusNow() const {
  {
    absl::MutexLock lock(&status_mu_);
    if (status_source_) return status_source_();
  }
  v1::SupervisorStatus status;
  status.set_address(grpc_address_);
  SetTimestamp(started_, status.mutable_leading_since());
  return status;
}

void Server::AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
  // The exposer holds collectables weakly.
  if (exposer_ != nullptr) exposer_->RegisterCollectable(collectable);
  added_collectables_.push_back(std::move(collectable));
}

absl::Status Server::ReloadCertificates() {
  if (certificates_ == nullptr) return absl::FailedPreconditionError("TLS is not configured");
  absl::Status s = certificates_->Reload();
  security_collector_->CountReload(s.ok());
  return s;
}

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
  if (listener_watcher_.joinable()) listener_watcher_.join();
  {
    absl::MutexLock lock(&listener_mu_);
    if (listener_ != nullptr) {
      listener_->server->Shutdown(std::chrono::system_clock::now() +
                                  std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
      listener_->server->Wait();
    }
  }
  exposer_.reset();
  // Fences not started yet stay pending in the store (run at the next start);
  // the one in flight finishes, and its result is committed.
  host_.set_fence_runner(nullptr);
  fence_.reset();
  host_.FlushWrites();
}

}  // namespace trainsup
