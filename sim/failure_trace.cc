#include "sim/failure_trace.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace trainsup::sim {

namespace {

constexpr double kSecondsPerDay = 86400;

struct KindName {
  FailureKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {
    {FailureKind::kCrash, "crash"},         {FailureKind::kHang, "hang"},
    {FailureKind::kNodeLost, "node_lost"},  {FailureKind::kSlow, "slow"},
    {FailureKind::kCorruption, "sdc"},      {FailureKind::kLossSpike, "loss_spike"},
};

bool KindOf(absl::string_view name, FailureKind* kind) {
  for (const KindName& k : kKindNames) {
    if (name == k.name) {
      *kind = k.kind;
      return true;
    }
  }
  return false;
}

void SortByTime(std::vector<FailureEvent>& trace) {
  std::stable_sort(trace.begin(), trace.end(), [](const FailureEvent& a, const FailureEvent& b) {
    return a.time_seconds < b.time_seconds;
  });
}

// Which nodes are lemons: a seeded choice of round(fraction x nodes).
std::vector<bool> LemonMask(const TraceOptions& o) {
  std::vector<uint32_t> order(o.nodes);
  for (uint32_t i = 0; i < o.nodes; ++i) order[i] = i;
  std::mt19937_64 rng(o.seed ^ 0x6c656d6f6eULL);  // its own stream: "lemon"
  std::shuffle(order.begin(), order.end(), rng);
  const auto lemons = static_cast<size_t>(std::llround(o.lemon_fraction * o.nodes));
  std::vector<bool> mask(o.nodes, false);
  for (size_t i = 0; i < lemons && i < order.size(); ++i) mask[order[i]] = true;
  return mask;
}

}  // namespace

const char* FailureKindName(FailureKind kind) {
  for (const KindName& k : kKindNames) {
    if (k.kind == kind) return k.name;
  }
  return "unknown";
}

const std::vector<FailureCause>& Llama3Causes() {
  using K = FailureKind;
  // Llama 3 report, table 5 (unexpected interruptions, 54 days, 16,384 GPUs).
  static const std::vector<FailureCause>* causes = new std::vector<FailureCause>{
      {"GPU", 148, K::kCrash, false, true},
      {"GPU HBM3 memory", 72, K::kCrash, false, true},
      {"software bug", 54, K::kCrash, true, false},
      {"network switch/cable", 35, K::kNodeLost, false, true},
      {"host maintenance", 32, K::kNodeLost, false, true},
      {"GPU SRAM memory", 19, K::kCrash, false, true},
      {"GPU system processor", 17, K::kCrash, false, true},
      {"NIC", 7, K::kNodeLost, false, true},
      {"NCCL watchdog timeout", 7, K::kHang, false, true},
      {"silent data corruption", 6, K::kCorruption, false, true},
      {"GPU thermal interface and sensor", 6, K::kCrash, false, true},
      {"SSD", 3, K::kCrash, false, true},
      {"power supply", 3, K::kNodeLost, false, true},
      {"server chassis", 2, K::kNodeLost, false, true},
      {"IO expansion board", 2, K::kCrash, false, true},
      {"dependency", 2, K::kCrash, false, false},
      {"CPU", 2, K::kCrash, false, true},
      {"system memory", 2, K::kCrash, false, true},
  };
  return *causes;
}

std::vector<uint32_t> LemonNodes(const TraceOptions& options) {
  const std::vector<bool> mask = LemonMask(options);
  std::vector<uint32_t> out;
  for (uint32_t i = 0; i < mask.size(); ++i) {
    if (mask[i]) out.push_back(i);
  }
  return out;
}

std::vector<FailureEvent> GenerateTrace(const TraceOptions& o) {
  std::vector<FailureEvent> trace;
  if (o.nodes == 0 || o.days <= 0) return trace;
  std::mt19937_64 rng(o.seed);
  const double horizon = o.days * kSecondsPerDay;

  // Node failures: one Poisson process of the whole cluster's rate; each
  // arrival lands on a node in proportion to its weight (lemons heavier).
  const std::vector<bool> lemon = LemonMask(o);
  std::vector<double> weights(o.nodes);
  for (uint32_t i = 0; i < o.nodes; ++i) weights[i] = lemon[i] ? o.lemon_factor : 1;
  std::discrete_distribution<uint32_t> pick_node(weights.begin(), weights.end());
  // Each cause in its share of its own process: the nodes' causes among
  // the nodes' failures, the workload's among the workload's.
  std::vector<double> node_counts, workload_counts;
  for (const FailureCause& c : Llama3Causes()) {
    node_counts.push_back(c.node_fault ? c.count : 0);
    workload_counts.push_back(c.node_fault ? 0 : c.count);
  }
  auto add = [&](double rate, std::vector<double>& counts, bool on_a_node) {
    if (rate <= 0) return;
    std::discrete_distribution<size_t> pick_cause(counts.begin(), counts.end());
    std::exponential_distribution<double> gap(rate);
    for (double t = gap(rng); t < horizon; t += gap(rng)) {
      const FailureCause& cause = Llama3Causes()[pick_cause(rng)];
      FailureEvent e;
      e.time_seconds = t;
      e.node = on_a_node ? pick_node(rng) : kNoNode;
      e.kind = cause.kind;
      e.cause = cause.name;
      e.deterministic = cause.deterministic;
      trace.push_back(e);
    }
  };
  // The cluster's rate is fixed; the weights only say which node it hits,
  // so the average node fails at the given rate.
  add(o.interruptions_per_node_day * o.nodes / kSecondsPerDay, node_counts, true);
  add(o.workload_interruptions_per_day / kSecondsPerDay, workload_counts, false);
  // Loss spikes: a rate per run, whatever its size.
  if (o.loss_spikes > 0) {
    std::exponential_distribution<double> gap(o.loss_spikes / horizon);
    for (double t = gap(rng); t < horizon; t += gap(rng)) {
      FailureEvent e;
      e.time_seconds = t;
      e.kind = FailureKind::kLossSpike;
      e.cause = "loss spike";
      trace.push_back(e);
    }
  }
  SortByTime(trace);
  return trace;
}

absl::StatusOr<std::vector<FailureEvent>> ParseTraceCsv(absl::string_view text) {
  std::vector<FailureEvent> trace;
  bool header_seen = false;
  size_t columns = 0;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("trace line ", line_number, ": ", why));
    };
    if (!header_seen) {
      if (fields.size() < 3 || fields[0] != "time" || fields[1] != "node" || fields[2] != "kind" ||
          (fields.size() > 3 && fields[3] != "cause") ||
          (fields.size() > 4 && fields[4] != "deterministic") || fields.size() > 5) {
        return bad("the header must be time,node,kind[,cause[,deterministic]]");
      }
      header_seen = true;
      columns = fields.size();
      continue;
    }
    if (fields.size() != columns) {
      return bad(absl::StrFormat("%d fields, the header has %d", fields.size(), columns));
    }
    FailureEvent e;
    uint32_t node = 0;
    if (!absl::SimpleAtod(fields[0], &e.time_seconds) || !std::isfinite(e.time_seconds) ||
        e.time_seconds < 0) {
      return bad(absl::StrCat("time \"", fields[0], "\" is not a number of seconds >= 0"));
    }
    if (fields[1] == "-") {
      node = kNoNode;
    } else if (!absl::SimpleAtoi(fields[1], &node) || node == kNoNode) {
      return bad(absl::StrCat("node \"", fields[1], "\" is not a node index or -"));
    }
    e.node = node;
    if (!KindOf(fields[2], &e.kind)) {
      return bad(absl::StrCat("kind \"", fields[2],
                              "\" is not crash, hang, node_lost, slow, sdc or loss_spike"));
    }
    if (columns > 3) e.cause = std::string(fields[3]);
    if (columns > 4) {
      if (fields[4] != "true" && fields[4] != "false") return bad("deterministic: true or false");
      e.deterministic = fields[4] == "true";
    }
    trace.push_back(std::move(e));
  }
  if (!header_seen) return absl::InvalidArgumentError("the trace has no header line");
  SortByTime(trace);
  return trace;
}

std::string TraceToCsv(const std::vector<FailureEvent>& trace) {
  std::string out = "time,node,kind,cause,deterministic\n";
  for (const FailureEvent& e : trace) {
    absl::StrAppendFormat(&out, "%.3f,%s,%s,%s,%s\n", e.time_seconds,
                          e.node == kNoNode ? std::string("-") : absl::StrCat(e.node),
                          FailureKindName(e.kind), e.cause, e.deterministic ? "true" : "false");
  }
  return out;
}

}  // namespace trainsup::sim
