#ifndef TRAINSUP_DAEMON_SERVER_H_
#define TRAINSUP_DAEMON_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "daemon/access_control.h"
#include "daemon/agent_service.h"
#include "daemon/descriptors.h"
#include "daemon/metrics.h"
#include "daemon/operator_service.h"
#include "daemon/security_metrics.h"
#include "daemon/serving_gate.h"
#include "daemon/supervisor_host.h"
#include "daemon/tls_server.h"

namespace prometheus {
class Collectable;
class Exposer;
}

namespace trainsup {
class FenceRunner;
class SharedJournalSink;
class SharedLog;
class StateStore;
}  // namespace trainsup

namespace trainsup {

struct ServerOptions {
  // gRPC address of AgentService and OperatorService. Port 0: any free port.
  // Default: loopback only.
  std::string listen = "127.0.0.1:7411";
  // Start as a standby (docs/ha.md): serve no one, decide nothing and leave
  // the state store unread until Lead(). Default: false (act at once).
  bool standby = false;
  // Prometheus exposition at /metrics. Empty: no metrics endpoint.
  std::string metrics_listen = "127.0.0.1:9741";
  // SQLite state store (WAL). Empty: nothing survives a restart (under an
  // election with a shared log: the store is kept in memory).
  std::string state_path;
  // Under an election: the state shared with the other instances (not
  // owned; must outlive the server). Lead() loads the store from it, and
  // every journal is committed to it, fenced by the leadership, before it
  // is acted on (docs/ha.md). Default: none.
  SharedLog* shared_log = nullptr;
  // Run for each quarantined node as `COMMAND NODE REASON`. Empty: none.
  std::string fence_command;
  // Run as `COMMAND NODE REASON` when an operator lifts a node's quarantine,
  // after the node's fence (e.g. to resume it in Slurm). Empty: none.
  std::string unfence_command;
  // The fence and unfence commands are killed after this long. Default: 30s.
  absl::Duration fence_timeout = absl::Seconds(30);
  // TLS on the gRPC port; with a client CA, mutual TLS (docs/security.md).
  ServerTlsOptions tls;
  // A file holding the operator bearer token (needs TLS). Default: none.
  std::string operator_token_file;
  // Serve plain text on a non-loopback --listen. Default: refused.
  bool insecure = false;
  SupervisorOptions core;
  MetricsOptions metrics;
  // How often the detectors run. Default: 1s.
  absl::Duration sweep_interval = absl::Seconds(1);
  AgentStreamLimits streams;
  // The state store's history (failures, restarts, events, stacks, ended
  // jobs) older than this is deleted, checked hourly. Default: 30 days.
  absl::Duration history_retention = absl::Hours(24 * 30);
};

// trainsupd's process-level wiring: the host around the core, the gRPC
// server with both services, and the metrics endpoint.
//
// The gRPC listener is never lost for good: gRPC 1.51 stops accepting
// connections after one failed accept4 (out of descriptors: EMFILE), so a
// watcher rebuilds the gRPC server on the same address when gRPC says so
// (daemon/grpc_log.h). The rebuild ends the open streams too (agents
// reconnect on their own) and frees their descriptors.
class Server {
 public:
  // Opens the state store and restores from it, binds and starts serving.
  // Errors say which file or address is the trouble.
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options,
                                                       const Clock* clock);
  ~Server();

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Addresses actually bound (the ports resolved when 0 was asked for).
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_address() const { return metrics_address_; }
  SupervisorHost& host() { return host_; }
  // The collector behind /metrics, also usable without the HTTP endpoint.
  const SupervisorCollector& collector() const { return *collector_; }

  // Re-reads the TLS certificate, key and client CA (SIGHUP); open agent
  // streams are kept. FailedPrecondition without TLS.
  absl::Status ReloadCertificates();
  const AccessControl& access() const { return *access_; }
  // Times the gRPC listener was rebuilt.
  uint64_t listener_restarts() const { return listener_restarts_.load(); }

  // Under an election (docs/ha.md). Lead(): loads the shared state into
  // the store and restores from it (the first time, and after each
  // StandBy(): the core starts over from what was committed, as a new
  // leader's would) and starts acting. StandBy(): stops acting at once (calls
  // refused with `why`, sweeps skipped, agent streams ended at their next
  // message);
  // `leader`, the leader's gRPC address when known, goes with each refusal
  // for clients to follow. `deadline` (not owned; null: none) bounds the
  // acting in time.
  absl::Status Lead(const ActingDeadline* deadline = nullptr);
  void StandBy(std::string why, std::string leader = "");
  bool acting() const { return gate_.acting(); }
  // What `trainsupctl status` says of the instances. `source` (called per
  // request, on gRPC's threads) replaces the default: a single instance,
  // acting since the server started.
  using StatusSource = std::function<v1::SupervisorStatus()>;
  void SetStatusSource(StatusSource source);
  v1::SupervisorStatus SupervisorStatusNow() const;
  // Adds `collectable` to /metrics (when served), and keeps it.
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

  // Stops accepting work, ends open streams (waiting up to `grace` for RPCs
  // in flight) and stops the metrics endpoint. Idempotent.
  void Shutdown(absl::Duration grace = absl::Seconds(2));

 private:
  Server(const ServerOptions& options, const Clock* clock, std::unique_ptr<StateStore> store,
         std::unique_ptr<AccessControl> access);
  // The gRPC server and the services registered with it (a service can be
  // registered with one server only, so a rebuild makes them afresh).
  struct Listener;
  // Builds and starts a listener on `address`; `port` gets the port bound.
  std::unique_ptr<Listener> BuildListener(const std::string& address, int* port);
  // Rebuilds the listener whenever gRPC stopped accepting connections.
  void ListenerLoop();
  void RebuildListener();
  void SweepLoop();
  // Deletes the store's history past --history-retention, at most hourly.
  void PruneHistory();

  std::unique_ptr<StateStore> store_;  // before host_: the host uses it
  ServingGate gate_;  // before access_, which reads it
  SharedLog* const shared_log_;
  std::unique_ptr<SharedJournalSink> shared_sink_;  // before host_, which writes to it
  std::unique_ptr<AccessControl> access_;  // before the services: they use it
  std::unique_ptr<ServerCertificates> certificates_;
  std::shared_ptr<SecurityCollector> security_collector_;
  SupervisorHost host_;
  std::unique_ptr<FenceRunner> fence_;
  const AgentStreamLimits stream_limits_;
  AgentStreamStats stream_stats_;  // across listeners
  std::shared_ptr<SupervisorCollector> collector_;
  std::shared_ptr<DescriptorCollector> descriptor_collector_;
  absl::Mutex listener_mu_;
  std::unique_ptr<Listener> listener_ ABSL_GUARDED_BY(listener_mu_);
  std::atomic<uint64_t> listener_restarts_{0};
  std::thread listener_watcher_;
  std::vector<std::shared_ptr<prometheus::Collectable>> added_collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string grpc_address_;
  std::string metrics_address_;
  const absl::Duration sweep_interval_;
  const absl::Duration history_retention_;
  absl::Time pruned_at_ = absl::InfinitePast();  // touched by the sweeper only
  std::thread sweeper_;
  absl::Mutex stop_mu_;
  bool stopping_ ABSL_GUARDED_BY(stop_mu_) = false;
  bool shut_down_ = false;
  absl::Mutex lead_mu_;
  bool restored_ ABSL_GUARDED_BY(lead_mu_) = false;
  const absl::Time started_;
  mutable absl::Mutex status_mu_;
  StatusSource status_source_ ABSL_GUARDED_BY(status_mu_);
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_SERVER_H_
