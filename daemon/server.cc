#include "daemon/server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/options.h"
#include "daemon/fence_runner.h"
#include "daemon/state_store.h"
#include "prometheus/exposer.h"

namespace trainsup {
namespace {

std::string HostOf(const std::string& host_port) { return host_port.substr(0, host_port.rfind(':')); }

}  // namespace

Server::Server(const ServerOptions& options, const Clock* clock, std::unique_ptr<StateStore> store)
    : store_(std::move(store)),
      host_(options.core, clock, store_.get()),
      agent_service_(&host_, options.streams),
      operator_service_(&host_),
      collector_(std::make_shared<SupervisorCollector>(&host_, options.metrics,
                                                       &agent_service_.stats())),
      sweep_interval_(options.sweep_interval),
      history_retention_(options.history_retention) {}

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
    host_.Sweep();
    PruneHistory();
    stop_mu_.Lock();
  }
}

Server::~Server() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options,
                                                      const Clock* clock) {
  if (absl::Status s = CheckHostPort(options.listen); !s.ok()) return s;
  if (!options.metrics_listen.empty()) {
    if (absl::Status s = CheckHostPort(options.metrics_listen); !s.ok()) return s;
  }
  std::unique_ptr<StateStore> store;
  if (!options.state_path.empty()) {
    absl::StatusOr<std::unique_ptr<StateStore>> opened = StateStore::Open(options.state_path);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  }
  std::unique_ptr<Server> server(new Server(options, clock, std::move(store)));
  if (absl::Status s = server->host_.Restore(); !s.ok()) return s;
  if (!options.fence_command.empty()) {
    SupervisorHost* host = &server->host_;
    server->fence_ = std::make_unique<FenceRunner>(
        options.fence_command, options.fence_timeout,
        [host](const std::string& node, bool ok, const std::string& detail) {
          host->FenceDone(node, ok, detail);
        });
    server->host_.set_fence_runner(server->fence_.get());
  }

  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&server->agent_service_);
  builder.RegisterService(&server->operator_service_);
  // Agents keep their stream alive with pings; allow them (gRPC refuses pings
  // more often than every 5 minutes by default and would drop the stream).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // And ping them: a host that lost power closes nothing, and its stream
  // would look open until TCP gives up (minutes to hours). The node-loss
  // rule notices the silence sooner; this frees the stream.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  builder.SetMaxReceiveMessageSize(static_cast<int>(kMaxMessageBytes));
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options.listen,
                                               " (address in use or not local?)"));
  }
  server->grpc_address_ = absl::StrCat(HostOf(options.listen), ":", port);

  if (!options.metrics_listen.empty()) {
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics_listen, ": ", e.what()));
    }
    server->exposer_->RegisterCollectable(server->collector_);
    std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_address_ =
        absl::StrCat(HostOf(options.metrics_listen), ":", ports.empty() ? 0 : ports.front());
  }
  server->sweeper_ = std::thread([s = server.get()] { s->SweepLoop(); });
  return server;
}

void Server::Shutdown(absl::Duration grace) {
  if (shut_down_) return;
  shut_down_ = true;
  {
    absl::MutexLock lock(&stop_mu_);
    stopping_ = true;
  }
  if (sweeper_.joinable()) sweeper_.join();
  if (grpc_server_ != nullptr) {
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(absl::ToInt64Milliseconds(grace)));
    grpc_server_->Wait();
  }
  exposer_.reset();
  host_.set_fence_runner(nullptr);
  fence_.reset();
}

}  // namespace trainsup
