#include "agent/dcgm_metrics.h"

#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainsup {
namespace {

enum class Series {
  kNone,
  kClockReasons,
  kTemperature,
  kPcieReplays,
  kEccUncorrectable,
  kUncorrectableRemappedRows,
  kRowRemapFailure,
  kLastXid,
};

Series SeriesOf(absl::string_view name) {
  if (name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" || name == "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") {
    return Series::kClockReasons;
  }
  if (name == "DCGM_FI_DEV_GPU_TEMP") return Series::kTemperature;
  if (name == "DCGM_FI_DEV_PCIE_REPLAY_COUNTER") return Series::kPcieReplays;
  if (name == "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") return Series::kEccUncorrectable;
  if (name == "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") return Series::kUncorrectableRemappedRows;
  if (name == "DCGM_FI_DEV_ROW_REMAP_FAILURE") return Series::kRowRemapFailure;
  if (name == "DCGM_FI_DEV_XID_ERRORS") return Series::kLastXid;
  return Series::kNone;
}

struct Sample {
  absl::string_view name;
  std::string gpu;   // the `gpu` label's value; "" when none
  std::string uuid;  // the `UUID` label's value
  double value = 0;
};

// One sample line: NAME{LABEL="VALUE",...} VALUE [TIMESTAMP]. Label values
// may hold escaped quotes, backslashes and commas.
bool ParseSample(absl::string_view line, Sample* out) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  out->name = line.substr(0, i);
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
        return false;
      }
      const absl::string_view label = absl::StripAsciiWhitespace(line.substr(i, eq - i));
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) ++j;
        value.push_back(line[j]);
      }
      if (j >= line.size()) return false;  // unterminated
      if (label == "gpu") out->gpu = std::move(value);
      if (label == "UUID") out->uuid = std::move(value);
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // '}'
  }
  const std::vector<absl::string_view> rest =
      absl::StrSplit(line.substr(i), ' ', absl::SkipWhitespace());
  return !rest.empty() && absl::SimpleAtod(rest[0], &out->value) && std::isfinite(out->value);
}

GpuHealth& GpuOf(DcgmScrape& scrape, int index, const std::string& uuid) {
  for (GpuHealth& gpu : scrape.gpus) {
    if (gpu.index == index && gpu.uuid == uuid) return gpu;
  }
  GpuHealth gpu;
  gpu.index = index;
  gpu.uuid = uuid;
  scrape.gpus.push_back(std::move(gpu));
  return scrape.gpus.back();
}

}  // namespace

absl::StatusOr<DcgmScrape> ParseDcgmExposition(absl::string_view text) {
  if (text.size() > kMaxDcgmTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("an exposition of ", text.size(), " bytes, past ", kMaxDcgmTextBytes));
  }
  const absl::string_view start = absl::StripLeadingAsciiWhitespace(text);
  if (start.empty() || start[0] == '<') {
    return absl::InvalidArgumentError("no Prometheus exposition (empty, or a page of markup)");
  }
  DcgmScrape scrape;
  bool any_sample = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    any_sample = true;
    if (line.size() > kMaxDcgmLineBytes) {
      ++scrape.lines_refused;
      continue;
    }
    const size_t name_end = line.find_first_of("{ ");
    const Series series = SeriesOf(line.substr(0, name_end));
    if (series == Series::kNone) continue;
    Sample s;
    int index = -1;
    if (!ParseSample(line, &s) || s.gpu.empty() || !absl::SimpleAtoi(s.gpu, &index) || index < 0) {
      ++scrape.lines_refused;
      continue;
    }
    GpuHealth& gpu = GpuOf(scrape, index, s.uuid);
    switch (series) {
      case Series::kClockReasons:
        if (s.value >= 0 && s.value < 1.8e19) gpu.clock_event_reasons = static_cast<uint64_t>(s.value);
        break;
      case Series::kTemperature:
        gpu.temperature_c = s.value;
        break;
      case Series::kPcieReplays:
        gpu.pcie_replays = s.value;
        break;
      case Series::kEccUncorrectable:
        gpu.ecc_uncorrectable = s.value;
        break;
      case Series::kUncorrectableRemappedRows:
        gpu.uncorrectable_remapped_rows = s.value;
        break;
      case Series::kRowRemapFailure:
        gpu.row_remap_failure = s.value;
        break;
      case Series::kLastXid:
        gpu.last_xid = s.value;
        break;
      case Series::kNone:
        break;
    }
  }
  if (!any_sample) return absl::InvalidArgumentError("an exposition without a sample");
  return scrape;
}

}  // namespace trainsup
