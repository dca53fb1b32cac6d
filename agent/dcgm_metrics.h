#ifndef TRAINSUP_AGENT_DCGM_METRICS_H_
#define TRAINSUP_AGENT_DCGM_METRICS_H_

// What NVIDIA's dcgm-exporter says of each GPU (docs/gpu.md, "DCGM"): its
// /metrics text (the Prometheus exposition format) read for the few series
// that explain a slow or failing GPU. Pure; bounded: a text beyond
// kMaxDcgmTextBytes is refused unread, a line beyond kMaxDcgmLineBytes is
// skipped and counted.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/gpu_health.h"

namespace trainsup {

constexpr size_t kMaxDcgmTextBytes = 4 << 20;  // 8 GPUs' full exposition is ~100 KiB
constexpr size_t kMaxDcgmLineBytes = 4096;

struct DcgmScrape {
  std::vector<GpuHealth> gpus;  // in the order first named
  // Lines of the series read that were refused: no gpu label (a sample
  // about no GPU), a value that is no number, a line past its bound.
  size_t lines_refused = 0;
};

// Reads an exposition text. InvalidArgument for what is no exposition (an
// HTML page, an empty body) or is past kMaxDcgmTextBytes.
absl::StatusOr<DcgmScrape> ParseDcgmExposition(absl::string_view text);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_DCGM_METRICS_H_
