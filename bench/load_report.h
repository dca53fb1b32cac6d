#ifndef TRAINSUP_BENCH_LOAD_REPORT_H_
#define TRAINSUP_BENCH_LOAD_REPORT_H_

// What agent_load measures outside gRPC, and how it prints a run: the
// supervisor process's CPU and memory from /proc, a /metrics scrape over a
// plain socket, percentiles, and the one table per run.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainsup {

// Nearest-rank percentiles; n == 0 when there was nothing to summarise.
struct Summary {
  size_t n = 0;
  double p50 = 0;
  double p99 = 0;
  double max = 0;
};
Summary Summarize(std::vector<double> values);

// utime + stime and memory of a process, from /proc/PID/stat and status.
struct ProcSample {
  bool ok = false;
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;  // VmRSS
  int64_t hwm_bytes = 0;  // VmHWM: the peak
};
ProcSample ReadProc(pid_t pid);

// One GET /metrics (HTTP/1.0, no dependency): how long it took, its size,
// and the heartbeat counters summed over their labels.
struct MetricsScrape {
  bool ok = false;
  std::string error;
  double seconds = 0;
  size_t bytes = 0;
  double heartbeats_received = 0;  // trainsup_heartbeats_received_total
  double heartbeats_rejected = 0;  // trainsup_heartbeats_rejected_total, every reason
};
MetricsScrape ScrapeMetrics(const std::string& host_port, double timeout_s);

// The run's table: rows of (figure, value, what it means), printed as
// markdown, and the same figures as flat JSON.
class ReportTable {
 public:
  void Row(std::string figure, std::string value, std::string note = "");
  // A JSON field; `json_value` is already JSON (a number, "text", null).
  void Json(std::string key, std::string json_value);
  void JsonNumber(const std::string& key, double value);
  void JsonText(const std::string& key, const std::string& value);

  std::string Markdown(const std::string& title) const;
  std::string ToJson() const;

 private:
  struct Line {
    std::string figure, value, note;
  };
  std::vector<Line> rows_;
  std::vector<std::pair<std::string, std::string>> json_;
};

// "12.3 ms", "1.20 s": a duration for the table.
std::string FormatSeconds(double seconds);
std::string FormatBytes(double bytes);

}  // namespace trainsup

#endif  // TRAINSUP_BENCH_LOAD_REPORT_H_
