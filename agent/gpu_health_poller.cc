#include "agent/gpu_health_poller.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/dcgm_metrics.h"
#include "agent/http_get.h"
#include "agent/nvidia_smi_q.h"
#include "common/bounded_run.h"
#include "common/log.h"

namespace trainsup {
namespace {

bool Configured(const std::string& value) { return !value.empty() && value != "none"; }

}  // namespace

GpuHealthPoller::GpuHealthPoller(GpuHealthPollerOptions options) : options_(std::move(options)) {}

GpuHealthPoller::~GpuHealthPoller() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

bool GpuHealthPoller::enabled() const {
  return Configured(options_.nvidia_smi) || Configured(options_.dcgm_url);
}

void GpuHealthPoller::Start() {
  if (!enabled() || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void GpuHealthPoller::Run() {
  for (;;) {
    GpuHealthReading reading = ReadOnce();
    absl::MutexLock lock(&mu_);
    if (!reading.source.empty()) latest_ = std::move(reading);
    auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stopping), options_.interval)) return;
  }
}

GpuHealthReading GpuHealthPoller::ReadOnce() {
  GpuHealthReading reading;
  std::optional<std::vector<GpuHealth>> smi = ReadNvidiaSmi();
  std::optional<std::vector<GpuHealth>> dcgm = ReadDcgm();
  if (smi) reading.source = "nvidia-smi";
  if (dcgm) absl::StrAppend(&reading.source, smi ? "+" : "", "dcgm-exporter");
  reading.gpus = MergeGpuHealth(smi ? *std::move(smi) : std::vector<GpuHealth>(),
                                dcgm ? *dcgm : std::vector<GpuHealth>());
  return reading;
}

std::optional<std::vector<GpuHealth>> GpuHealthPoller::ReadNvidiaSmi() {
  if (!Configured(options_.nvidia_smi) || nvidia_smi_absent_) return std::nullopt;
  BoundedRunOptions run;
  run.timeout = options_.nvidia_smi_timeout;
  run.max_output = kMaxNvidiaSmiQueryBytes;
  run.merge_stderr = false;
  const BoundedRunResult result =
      RunBounded({options_.nvidia_smi, "-q", "-d", "PERFORMANCE,ROW_REMAPPER"}, run);
  absl::StatusOr<std::vector<GpuHealth>> gpus =
      result.succeeded() ? ParseNvidiaSmiQuery(result.output)
                         : absl::UnavailableError(
                               result.spawn_error != 0 ? strerror(result.spawn_error)
                               : result.timed_out      ? "did not answer in time"
                                                       : "did not exit 0");
  if (gpus.ok()) return *std::move(gpus);
  // A command that is not there will not be: no GPU driver on this node.
  if (result.spawn_error != 0) nvidia_smi_absent_ = true;
  absl::MutexLock lock(&mu_);
  // Said once, then counted: a node without GPUs fails every round.
  if (nvidia_smi_failures_++ == 0) {
    TRAINSUP_LOG_INFO("GPU health: %s -q: %s (counted from now on)", options_.nvidia_smi,
                      std::string(gpus.status().message()));
  }
  return std::nullopt;
}

std::optional<std::vector<GpuHealth>> GpuHealthPoller::ReadDcgm() {
  if (!Configured(options_.dcgm_url)) return std::nullopt;
  HttpGetOptions get;
  get.timeout = options_.dcgm_timeout;
  get.max_bytes = kMaxDcgmTextBytes;
  absl::StatusOr<std::string> text = HttpGet(options_.dcgm_url, get);
  absl::StatusOr<DcgmScrape> scrape =
      text.ok() ? ParseDcgmExposition(*text) : absl::StatusOr<DcgmScrape>(text.status());
  if (scrape.ok()) return std::move(scrape->gpus);
  absl::MutexLock lock(&mu_);
  if (dcgm_failures_++ == 0) {
    TRAINSUP_LOG_WARN("GPU health: dcgm-exporter: %s (counted from now on)",
                      std::string(scrape.status().message()));
  }
  return std::nullopt;
}

std::optional<GpuHealthReading> GpuHealthPoller::TakeChanged(bool always) {
  absl::MutexLock lock(&mu_);
  if (!latest_) return std::nullopt;
  if (!always && taken_any_ && !HealthChanged(taken_, latest_->gpus)) return std::nullopt;
  taken_ = latest_->gpus;
  taken_any_ = true;
  return latest_;
}

int GpuHealthPoller::nvidia_smi_failures() const {
  absl::MutexLock lock(&mu_);
  return nvidia_smi_failures_;
}

int GpuHealthPoller::dcgm_failures() const {
  absl::MutexLock lock(&mu_);
  return dcgm_failures_;
}

}  // namespace trainsup
