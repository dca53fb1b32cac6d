#include "cli/render.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "cli/table.h"
#include "common/event_kinds.h"
#include "common/format.h"
#include "absl/strings/escaping.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/timestamp.pb.h"
#include "google/protobuf/util/time_util.h"

namespace trainsup {

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// A JSON string: quotes, backslashes and control characters escaped, nothing
// else (text stays readable: no "\u003e" for '>').
void AppendJsonString(absl::string_view text, std::string* out) {
  out->push_back('"');
  for (const char c : text) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

// A double as JSON: the shortest text that reads back the same; NaN and the
// infinities as the strings protobuf's JSON uses.
std::string JsonDouble(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  std::string text = absl::StrFormat("%.15g", v);
  if (std::strtod(text.c_str(), nullptr) != v) text = absl::StrFormat("%.17g", v);
  return text;
}

class JsonWriter {
 public:
  explicit JsonWriter(bool pretty) : pretty_(pretty) {}

  void WriteMessage(const Message& m, int depth) {
    const Descriptor* d = m.GetDescriptor();
    if (d->full_name() == "google.protobuf.Timestamp") {
      const Reflection* r = m.GetReflection();
      google::protobuf::Timestamp t;
      t.set_seconds(r->GetInt64(m, d->FindFieldByNumber(1)));
      t.set_nanos(r->GetInt32(m, d->FindFieldByNumber(2)));
      AppendJsonString(google::protobuf::util::TimeUtil::ToString(t), &out_);
      return;
    }
    const Reflection* r = m.GetReflection();
    out_ += "{";
    bool first = true;
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      // Every field, zeros included, but an absent message or optional
      // (absent is not zero there).
      if (!f->is_repeated() && f->has_presence() && !r->HasField(m, f)) continue;
      out_ += first ? "" : ",";
      first = false;
      Newline(depth + 1);
      AppendJsonString(f->name(), &out_);
      out_ += pretty_ ? ": " : ":";
      if (f->is_map()) {
        WriteMap(m, f, depth + 1);
      } else if (f->is_repeated()) {
        const int n = r->FieldSize(m, f);
        out_ += "[";
        for (int k = 0; k < n; ++k) {
          out_ += k == 0 ? "" : ",";
          Newline(depth + 2);
          WriteValue(m, f, k, depth + 2);
        }
        if (n > 0) Newline(depth + 1);
        out_ += "]";
      } else {
        WriteValue(m, f, -1, depth + 1);
      }
    }
    if (!first) Newline(depth);
    out_ += "}";
  }

  std::string Take() { return std::move(out_); }

 private:
  void Newline(int depth) {
    if (!pretty_) return;
    out_ += "\n";
    out_.append(2 * depth, ' ');
  }

  // Map entries by key, as text.
  void WriteMap(const Message& m, const FieldDescriptor* f, int depth) {
    const Reflection* r = m.GetReflection();
    std::vector<std::pair<std::string, const Message*>> entries;
    for (int k = 0; k < r->FieldSize(m, f); ++k) {
      const Message& entry = r->GetRepeatedMessage(m, f, k);
      const FieldDescriptor* key = entry.GetDescriptor()->map_key();
      std::string text;
      if (key->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        text = entry.GetReflection()->GetString(entry, key);
      } else {
        JsonWriter scalar(false);
        scalar.WriteValue(entry, key, -1, 0);
        text = scalar.Take();
      }
      entries.emplace_back(std::move(text), &entry);
    }
    std::sort(entries.begin(), entries.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    out_ += "{";
    for (size_t k = 0; k < entries.size(); ++k) {
      out_ += k == 0 ? "" : ",";
      Newline(depth + 1);
      AppendJsonString(entries[k].first, &out_);
      out_ += pretty_ ? ": " : ":";
      const Message& entry = *entries[k].second;
      WriteValue(entry, entry.GetDescriptor()->map_value(), -1, depth + 1);
    }
    if (!entries.empty()) Newline(depth);
    out_ += "}";
  }

  // Field `f` of `m`, element `index` of a repeated one (-1: singular).
  // 64-bit integers are JSON numbers, as every other number.
  void WriteValue(const Message& m, const FieldDescriptor* f, int index, int depth) {
    const Reflection* r = m.GetReflection();
    const bool rep = index >= 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        absl::StrAppend(&out_, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        absl::StrAppend(&out_, rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        absl::StrAppend(&out_, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        absl::StrAppend(&out_, rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        out_ += JsonDouble(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        out_ += JsonDouble(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        out_ += (rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false";
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        AppendJsonString((rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f))->name(),
                         &out_);
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        const std::string text = rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
        if (f->type() == FieldDescriptor::TYPE_BYTES) {
          AppendJsonString(absl::Base64Escape(text), &out_);
        } else {
          AppendJsonString(text, &out_);
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        WriteMessage(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), depth);
        break;
    }
  }

  const bool pretty_;
  std::string out_;
};

}  // namespace

std::string RenderJson(const google::protobuf::Message& message) {
  JsonWriter writer(/*pretty=*/true);
  writer.WriteMessage(message, 0);
  return writer.Take() + "\n";
}

std::string RenderJsonLine(const google::protobuf::Message& message) {
  JsonWriter writer(/*pretty=*/false);
  writer.WriteMessage(message, 0);
  return writer.Take() + "\n";
}

const std::vector<std::string>& EventKindNames() {
  static const std::vector<std::string>* const kNames = [] {
    auto* names = new std::vector<std::string>;
    for (const EventKindInfo& kind : EventKindTable()) names->emplace_back(kind.name);
    return names;
  }();
  return *kNames;
}

std::string FormatSeconds(double seconds) {
  if (!(seconds >= 0)) return "-";  // unknown (negative) or NaN
  // Choose the unit after rounding, so that 0.9996 reads 1.00s, not 1000ms.
  if (std::round(seconds * 1000) < 1000) return absl::StrFormat("%.0fms", seconds * 1000);
  if (std::round(seconds * 100) < 6000) return absl::StrFormat("%.2fs", seconds);
  if (!std::isfinite(seconds)) return HumanSeconds(seconds);  // "never"
  return absl::FormatDuration(absl::Seconds(std::round(seconds)));  // "27m13s", "24h11s"
}

std::string FormatMeasured(double seconds) {
  return seconds > 0 ? FormatSeconds(seconds) : "-";
}

std::string FormatAge(double seconds) {
  return seconds >= 0 ? FormatSeconds(seconds) + " ago" : "-";
}

std::string FormatStep(int64_t step) { return step < 0 ? "-" : absl::StrCat(step); }

std::vector<std::string> RankVerdictFlags(const v1::Rank& rank) {
  std::vector<std::string> flags;
  if (rank.stall_culprit()) flags.push_back("STALL-CULPRIT");
  if (rank.crash_culprit()) flags.push_back("CRASHED-FIRST");
  if (rank.straggler()) flags.push_back("STRAGGLER");
  return flags;
}

std::string RankFlags(const v1::Rank& rank) {
  std::vector<std::string> flags = RankVerdictFlags(rank);
  if (rank.liveness() == "dead" && !rank.exit().empty()) flags.push_back(rank.exit());
  return absl::StrJoin(flags, ",");
}

const std::vector<std::string>& RankColumns() {
  static const std::vector<std::string>* const kColumns = new std::vector<std::string>{
      "RANK", "NODE", "PID", "STEP", "PHASE", "COMPUTE_P99", "STEP_P50", "STEP_P99",
      "LAST_SEEN", "LIVENESS", "LOSS", "FLAGS"};
  return *kColumns;
}

std::vector<std::string> RankCells(const v1::Rank& r) {
  return {absl::StrCat(r.rank()),
          r.node(),
          absl::StrCat(r.pid()),
          FormatStep(r.step()),
          r.phase(),
          FormatMeasured(r.compute_p99_seconds()),
          FormatMeasured(r.step_p50_seconds()),
          FormatMeasured(r.step_p99_seconds()),
          FormatAge(r.last_heartbeat_age_seconds()),
          r.liveness().empty() ? "-" : r.liveness(),
          r.has_loss() ? absl::StrFormat("%.4g", r.loss()) : "-",
          RankFlags(r)};
}

std::string RankCountsText(const v1::RankSummary& s) {
  return absl::StrFormat("alive %d, dead %d, unknown %d, finished %d", s.alive(), s.dead(),
                         s.unknown(), s.finished());
}

namespace {

absl::Time TimeOf(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// The STATE cell: the state, `,STALLED` while hung, `,NO_AGENT` while it
// waits for `resume` and no agent waits to run it.
std::string JobStateCell(const v1::Job& job) {
  const bool waits_for_resume =
      job.state() == "held" || job.state() == "killed" || job.state() == "failed";
  return absl::StrCat(job.state(), job.stalled() ? ",STALLED" : "",
                      waits_for_resume && job.agents_waiting() == 0 ? ",NO_AGENT" : "");
}

}  // namespace

std::string RenderJobsTable(const v1::ListJobsResponse& response, absl::Time now) {
  Table table({"JOB", "GEN", "STATE", "RANKS", "ALIVE", "NODES", "STEP", "STEP_P50", "STEP_P99",
               "LAST_PROGRESS", "STRAGGLERS", "RESTARTS", "HEARTBEATS"});
  for (const v1::Job& job : response.jobs()) {
    std::string progress = "-";
    if (job.has_last_progress_time()) {
      progress = FormatAge(absl::ToDoubleSeconds(now - TimeOf(job.last_progress_time())));
    }
    table.AddRow({job.job_id(), absl::StrCat(job.generation()),
                  JobStateCell(job),
                  absl::StrCat(job.ranks_reporting(), "/", job.world_size()),
                  absl::StrCat(job.ranks_alive()), absl::StrCat(job.nodes()), FormatStep(job.step()),
                  FormatMeasured(job.step_p50_seconds()), FormatMeasured(job.step_p99_seconds()),
                  progress, absl::StrCat(job.stragglers()), absl::StrCat(job.restarts()),
                  absl::StrCat(job.heartbeats_received())});
  }
  return table.Render();
}

std::string RenderRanksSummary(const v1::ListRanksResponse& response, const std::string& shown) {
  const v1::RankSummary& s = response.summary();
  std::string line = absl::StrFormat(
      "job %s: %d of %d ranks heard (%s), stragglers %d, steps %s..%s", response.job_id(),
      s.ranks(), response.world_size(), RankCountsText(s), s.stragglers(),
      FormatStep(s.min_step()), FormatStep(s.max_step()));
  if (s.compute_p99_max_seconds() > 0) {
    absl::StrAppend(&line, ", compute p99 median ", FormatSeconds(s.compute_p99_median_seconds()),
                    " max ", FormatSeconds(s.compute_p99_max_seconds()));
  }
  if (s.ranks() > 0) {
    absl::StrAppend(&line, ", oldest heartbeat ", FormatAge(s.oldest_heartbeat_age_seconds()));
  }
  if (!shown.empty()) absl::StrAppend(&line, "; ", shown);
  return line + "\n";
}

std::string RenderRanksTable(const v1::ListRanksResponse& response) {
  Table table(RankColumns());
  for (const v1::Rank& r : response.ranks()) table.AddRow(RankCells(r));
  return table.Render();
}

std::string RenderNodesTable(const v1::ListNodesResponse& response) {
  Table table({"NODE", "JOB", "GEN", "CONNECTED", "COMMAND", "RANKS", "LAST_REPORT", "HEARTBEATS",
               "GPU_ERROR", "QUARANTINE"});
  for (const v1::Node& n : response.nodes()) {
    const std::string connected = n.unreachable() ? "UNREACHABLE" : (n.connected() ? "yes" : "no");
    table.AddRow({n.node(), n.job_id(), absl::StrCat(n.generation()), connected,
                  n.launcher_state(), absl::StrCat(n.ranks()),
                  FormatAge(n.last_report_age_seconds()), absl::StrCat(n.heartbeats_received()),
                  n.last_gpu_error().empty()
                      ? "-"
                      : absl::StrCat(n.last_gpu_error(), " (",
                                     FormatAge(n.last_gpu_error_age_seconds()), ")"),
                  n.quarantined() ? "QUARANTINED: " + n.quarantine_reason() : "-"});
  }
  return table.Render();
}

std::string RenderSupervisorStatus(const v1::SupervisorStatus& status, absl::Time now) {
  const absl::Time since = TimeOf(status.leading_since());
  const std::string when = absl::StrCat(Timestamp(since), " (",
                                        FormatAge(absl::ToDoubleSeconds(now - since)), ")");
  if (!status.elected()) {
    return absl::StrCat("a single instance at ", status.address(),
                        " (no election: trainsupd runs without --etcd-endpoints), acting since ",
                        when, "\n");
  }
  std::string out = absl::StrCat("leader: ", status.instance(), " at ", status.address(),
                                 ", epoch ", status.epoch(), ", leading since ", when, "\n",
                                 "election: ", status.election(), "\n");
  if (!status.candidates_error().empty()) {
    return absl::StrCat(out, "candidates: unknown (", status.candidates_error(), ")\n");
  }
  Table table({"INSTANCE", "ADDRESS", "ROLE", "CREATE_REVISION"});
  for (const v1::SupervisorInstance& i : status.instances()) {
    table.AddRow({i.name(), i.address(), i.leader() ? "leader" : "standby",
                  absl::StrCat(i.create_revision())});
  }
  return out + table.Render();
}

std::string RenderKillCriteriaTable(const v1::ListKillCriteriaResponse& response) {
  if (response.jobs_size() == 0) return "no kill criteria set\n";
  Table table({"JOB", "STATE", "SOURCE", "CRITERION", "RULE", "NOW", "RATIO", "ACTION"});
  for (const v1::JobKillCriteria& job : response.jobs()) {
    const v1::KillCriteria& c = job.criteria();
    const std::string action = c.observe_only() ? "report" : "stop";
    for (const v1::KillCriterionStatus& s : job.status()) {
      std::string rule;
      std::string now = "-";
      if (s.criterion() == "loss_above") {
        rule = absl::StrFormat("loss > %g from step %d", c.loss_above(), c.at_step());
      } else if (s.criterion() == "reference_curve") {
        rule = absl::StrFormat("curve of %d points + %g%s", c.reference_size(),
                               c.band_absolute() ? c.band() : c.band() * 100,
                               c.band_absolute() ? "" : "%");
      } else {
        rule = absl::StrFormat("%d loss shifts in a row", c.spikes());
        now = absl::StrCat(s.spikes(), " in a row");
      }
      if (s.criterion() != "loss_spikes" && s.judged()) {
        now = absl::StrFormat("%.4g vs %.4g at step %d", s.loss(), s.limit(), s.step());
      }
      table.AddRow({job.job_id(), job.state(), job.source(), s.criterion(), rule, now,
                    s.judged() ? absl::StrFormat("%.2f", s.ratio()) : "-",
                    job.fired() && job.state() == "killed" ? "killed" : action});
    }
  }
  return table.Render();
}

std::string RenderStacks(const v1::StacksResponse& s) {
  size_t ranks = 0;
  for (const v1::StackGroup& g : s.groups()) ranks += g.ranks_size();
  std::string out = absl::StrFormat(
      "job %s generation %d: Python stacks of %s in %s, collected in %s before the stop (event "
      "%d)\n",
      s.job_id(), s.generation(), Counted(ranks + s.unanswered_ranks_size(), "rank", "ranks"),
      Counted(s.groups_size(), "group", "groups"), FormatSeconds(s.collect_seconds()),
      s.event_id());
  for (const v1::StackGroup& g : s.groups()) {
    std::vector<std::string> where;
    for (int i = 0; i < g.ranks_size(); ++i) {
      where.push_back(absl::StrCat(g.ranks(i), i < g.nodes_size() ? absl::StrCat(" (", g.nodes(i), ")") : ""));
    }
    absl::StrAppend(&out, "\n== ", g.ranks_size(), g.ranks_size() == 1 ? " rank: " : " ranks: ",
                    absl::StrJoin(where, ", "),
                    g.culprit() ? "   <- holds the culprit the stall named" : "", "\n");
    for (absl::string_view line : absl::StrSplit(g.stack(), '\n')) {
      if (!line.empty()) absl::StrAppend(&out, "   ", line, "\n");
    }
  }
  if (s.unanswered_ranks_size() > 0) {
    absl::StrAppend(&out, "\nno stack from ", s.unanswered_ranks_size() == 1 ? "rank " : "ranks ",
                    absl::StrJoin(s.unanswered_ranks(), ", "),
                    " (no stack signal registered, or stuck where Python cannot run)\n");
  }
  if (s.has_collective()) {
    absl::StrAppend(&out, "\nNCCL flight recorder (", Counted(s.collective().dumps(), "dump", "dumps"),
                    "): ", s.collective().text(), "\n");
    for (const std::string& unread : s.collective().unread_dumps()) {
      absl::StrAppend(&out, "   a dump not read: ", unread, "\n");
    }
  }
  return out;
}

std::string RenderEventLine(const v1::Event& e) {
  std::string where;
  if (e.has_rank()) absl::StrAppend(&where, " rank ", e.rank());
  if (!e.node().empty()) absl::StrAppend(&where, " node ", e.node());
  return absl::StrCat(Timestamp(TimeOf(e.time())), " ", e.kind(), " ", e.job_id(), "#", e.generation(), where,
                      ": ", e.message(), "\n");
}

namespace {

std::string Mtbf(const v1::Mtbf& m) {
  return absl::StrFormat(
      "%s (%.0f%% interval %s .. %s; plan with %s) from %s over %s running",
      FormatSeconds(m.mtbf_seconds()), 100 * m.confidence(), FormatSeconds(m.lower_seconds()),
      FormatSeconds(m.upper_seconds()), FormatSeconds(m.conservative_seconds()),
      Counted(m.failures(), "failure", "failures"), FormatSeconds(m.exposure_seconds()));
}

void AddLedgerRow(Table& table, const std::string& name, const v1::LedgerBuckets& b) {
  table.AddRow({name, FormatSeconds(b.wall_seconds()), FormatSeconds(b.useful_seconds()),
                FormatSeconds(b.starved_seconds()), FormatSeconds(b.checkpoint_blocked_seconds()),
                FormatSeconds(b.lost_seconds()), Percent(b.goodput_fraction())});
}

}  // namespace

// "loss_flat 0, loss_shifted 0, step_time_ratio 1.02": the job's signals map
// by name.
std::string SignalsText(const v1::Job& job, bool nonzero_only) {
  std::vector<std::pair<std::string, double>> signals;
  for (const auto& [name, value] : job.signals()) {
    if (!nonzero_only || value != 0) signals.emplace_back(name, value);
  }
  std::sort(signals.begin(), signals.end());
  std::vector<std::string> parts;
  for (const auto& [name, value] : signals) parts.push_back(absl::StrFormat("%s %.4g", name, value));
  return absl::StrJoin(parts, ", ");
}

std::string RenderJobDetail(const v1::JobDetail& d) {
  const v1::Job& job = d.job();
  std::string out;
  absl::StrAppend(&out, "job           ", job.job_id(), "\n");
  absl::StrAppend(&out, "state         ", job.state(), job.stalled() ? " (stalled)" : "", ": ",
                  job.state_reason(), "\n");
  absl::StrAppend(&out, "generation    ", job.generation(), " (",
                  Counted(job.restarts(), "restart", "restarts"), "), step ",
                  FormatStep(job.step()), ", ", job.ranks_reporting(), "/", job.world_size(),
                  " ranks\n");
  if (job.signals_size() > 0) absl::StrAppend(&out, "signals       ", SignalsText(job), "\n");
  absl::StrAppend(&out, "mtbf (job)    ", Mtbf(d.job_mtbf()), "\n");
  absl::StrAppend(&out, "mtbf (all)    ", Mtbf(d.cluster_mtbf()), "\n");
  absl::StrAppend(&out, "checkpoint    C = ", FormatSeconds(d.checkpoint_cost_seconds()),
                  d.checkpoint_cost_measured() ? " (measured)" : " (prior)",
                  d.checkpoint_async_seconds() > 0
                      ? absl::StrCat(", then ", FormatSeconds(d.checkpoint_async_seconds()),
                                     " in the background")
                      : "",
                  "\n");
  absl::StrAppend(&out, "restart       R = ", FormatSeconds(d.restart_cost_seconds()),
                  d.restart_cost_measured() ? " (measured)" : " (prior)", "\n");
  if (d.plans_size() > 0) {
    const v1::CheckpointPlan& p = d.plans(d.plans_size() - 1);
    absl::StrAppend(&out, "plan          every ", p.interval_steps(), " steps (",
                    FormatSeconds(d.planned_interval_seconds()), "; Young ",
                    FormatSeconds(d.young_interval_seconds()), ", Daly ",
                    FormatSeconds(d.daly_interval_seconds()), ") from step ",
                    p.effective_from_step(), ", expected waste ",
                    Percent(d.expected_waste_fraction()), "; next checkpoint at step ",
                    d.next_checkpoint_step() < 0 ? std::string("-")
                                                 : absl::StrCat(d.next_checkpoint_step()),
                    "\n");
    if (!d.plan_verdict().empty()) absl::StrAppend(&out, "verdict       ", d.plan_verdict(), "\n");
    for (const std::string& w : d.plan_warnings()) absl::StrAppend(&out, "warning       ", w, "\n");
  } else {
    absl::StrAppend(&out, "plan          none yet (published once the job has a step time)\n");
  }
  Table table({"LEDGER", "WALL", "USEFUL", "STARVED", "CHECKPOINT", "LOST", "GOODPUT"});
  AddLedgerRow(table, "job", d.ledger());
  for (const v1::GenerationLedger& g : d.generations()) {
    AddLedgerRow(table, absl::StrCat("generation ", g.generation()), g.buckets());
  }
  absl::StrAppend(&out, "\n", table.Render());
  return out;
}

std::string RenderEventsTable(const v1::ListEventsResponse& response) {
  Table table({"ID", "TIME", "KIND", "JOB", "GEN", "RANK", "NODE", "MESSAGE"});
  for (const v1::Event& e : response.events()) {
    table.AddRow({absl::StrCat(e.id()), Timestamp(TimeOf(e.time())), e.kind(), e.job_id(),
                  absl::StrCat(e.generation()), e.has_rank() ? absl::StrCat(e.rank()) : "-",
                  e.node().empty() ? "-" : e.node(), e.message()});
  }
  return table.Render();
}

// ---- Offline calculators ----

namespace {

// "46m29s": the one duration format (FormatSeconds); -o json has the seconds.
std::string IntervalWithSeconds(double seconds) { return FormatSeconds(seconds); }
// A key-value line of the calculators' summaries.
std::string Line(absl::string_view key, absl::string_view value) {
  return absl::StrFormat("%-16s%s\n", key, value);
}

absl::Status BadFlag(absl::string_view flag, absl::string_view want, double got) {
  return absl::InvalidArgumentError(absl::StrFormat("%s must be %s, got %g", flag, want, got));
}
bool Positive(double v) { return std::isfinite(v) && v > 0; }
bool NonNegative(double v) { return std::isfinite(v) && v >= 0; }

v1::CheckpointWaste WasteToProto(const CheckpointWaste& w) {
  v1::CheckpointWaste out;
  out.set_interval_seconds(w.interval_seconds);
  out.set_write_tax_fraction(w.write_tax_fraction);
  out.set_rework_fraction(w.rework_fraction);
  out.set_total_waste_fraction(w.total_waste_fraction);
  out.set_goodput_fraction(w.goodput_fraction);
  return out;
}

}  // namespace

absl::StatusOr<CheckpointPlanInputs> PlanInputsFromFlags(const PlanFlags& f) {
  if (!Positive(f.mtbf_hours)) {
    return BadFlag("--mtbf-hours", "a number of hours > 0", f.mtbf_hours);
  }
  if (!Positive(f.checkpoint_seconds)) {
    return BadFlag("--checkpoint-seconds", "a number of seconds > 0", f.checkpoint_seconds);
  }
  if (!NonNegative(f.restart_seconds)) {
    return BadFlag("--restart-seconds", "a number of seconds >= 0", f.restart_seconds);
  }
  if (f.writers < 1) return BadFlag("--writers", "at least 1", f.writers);
  if (f.async_snapshot_seconds.has_value() && !Positive(*f.async_snapshot_seconds)) {
    return BadFlag("--async-snapshot-seconds",
                   "a number of seconds > 0 (leave it out for a synchronous write)",
                   *f.async_snapshot_seconds);
  }
  if (f.run_hours.has_value() && !Positive(*f.run_hours)) {
    return BadFlag("--run-hours", "a number of hours > 0", *f.run_hours);
  }
  const CheckpointCost cost =
      SplitWriteCost(f.checkpoint_seconds, f.writers, f.async_snapshot_seconds.value_or(0));
  CheckpointPlanInputs in;
  in.checkpoint_seconds = cost.blocking_seconds;
  in.async_write_seconds = cost.async_write_seconds;
  in.mtbf_seconds = f.mtbf_hours * 3600;
  in.restart_seconds = f.restart_seconds;
  if (f.run_hours.has_value()) in.run_seconds = *f.run_hours * 3600;
  return in;
}

std::string RenderCheckpointPlanTable(const PlanFlags& f, const CheckpointPlan& plan) {
  const CheckpointPlanInputs& in = plan.inputs;
  std::string out;
  out += Line("mtbf", IntervalWithSeconds(in.mtbf_seconds));
  const double write = f.checkpoint_seconds / f.writers;
  std::string writers = f.writers == 1 ? "1 writer" : absl::StrCat(f.writers, " writers");
  if (in.async_write_seconds > 0) {
    out += Line("checkpoint",
                absl::StrFormat("blocks %gs (asynchronous snapshot)", in.checkpoint_seconds));
    out += Line("async write",
                absl::StrFormat("%gs in the background (%gs / %s); it must finish before the "
                                "next checkpoint, so the interval is at least %s",
                                write, f.checkpoint_seconds, writers,
                                FormatSeconds(in.async_write_seconds)));
  } else {
    out += Line("checkpoint", f.writers == 1
                                  ? absl::StrFormat("blocks %gs (synchronous write)", write)
                                  : absl::StrFormat("blocks %gs (synchronous write: %gs / %s)",
                                                    write, f.checkpoint_seconds, writers));
  }
  out += Line("restart", IntervalWithSeconds(in.restart_seconds));
  if (in.run_seconds.has_value()) out += Line("run", IntervalWithSeconds(*in.run_seconds));
  out += "\n";
  out += Line("young interval", IntervalWithSeconds(plan.young_interval_seconds) +
                                    "  T* = sqrt(2 C M)");
  out += Line("daly interval", IntervalWithSeconds(plan.daly_interval_seconds));
  out += Line("at young's T*",
              absl::StrFormat("write tax %s + rework %s = overhead %s (goodput %s)",
                              Percent(plan.at_young.write_tax_fraction),
                              Percent(plan.at_young.rework_fraction),
                              Percent(plan.at_young.total_waste_fraction),
                              Percent(plan.at_young.goodput_fraction)));
  if (plan.interval_seconds != plan.young_interval_seconds) {
    out += Line("planned", absl::StrFormat(
                               "%s, raised to the asynchronous write: overhead %s (goodput %s)",
                               IntervalWithSeconds(plan.interval_seconds),
                               Percent(plan.at_interval.total_waste_fraction),
                               Percent(plan.at_interval.goodput_fraction)));
  }
  out += "\n";
  Table table({"INTERVAL", "FACTOR", "WRITE_TAX", "REWORK", "TOTAL_WASTE", "GOODPUT", "NOTE"});
  for (const CheckpointSensitivityRow& row : plan.sensitivity) {
    table.AddRow({FormatSeconds(row.waste.interval_seconds), absl::StrFormat("%gx", row.factor),
                  Percent(row.waste.write_tax_fraction), Percent(row.waste.rework_fraction),
                  Percent(row.waste.total_waste_fraction), Percent(row.waste.goodput_fraction),
                  row.write_overlaps_next ? "write still running at the next" : ""});
  }
  out += table.Render();
  out += "\n";
  for (const std::string& w : plan.warnings) out += "warning: " + w + "\n";
  out += "verdict: " + plan.verdict_text + "\n";
  return out;
}

v1::CheckpointPlanResult CheckpointPlanToProto(const PlanFlags& f, const CheckpointPlan& plan) {
  const CheckpointPlanInputs& in = plan.inputs;
  v1::CheckpointPlanResult out;
  out.set_mtbf_seconds(in.mtbf_seconds);
  out.set_checkpoint_write_seconds(f.checkpoint_seconds);
  out.set_writers(f.writers);
  if (f.async_snapshot_seconds.has_value()) {
    out.set_async_snapshot_seconds(*f.async_snapshot_seconds);
  }
  out.set_restart_seconds(in.restart_seconds);
  if (in.run_seconds.has_value()) out.set_run_seconds(*in.run_seconds);
  out.set_blocking_checkpoint_seconds(in.checkpoint_seconds);
  out.set_async_write_seconds(in.async_write_seconds);
  out.set_young_interval_seconds(plan.young_interval_seconds);
  out.set_daly_interval_seconds(plan.daly_interval_seconds);
  *out.mutable_at_young_interval() = WasteToProto(plan.at_young);
  out.set_planned_interval_seconds(plan.interval_seconds);
  *out.mutable_at_planned_interval() = WasteToProto(plan.at_interval);
  for (const CheckpointSensitivityRow& row : plan.sensitivity) {
    v1::CheckpointSensitivityRow* r = out.add_sensitivity();
    r->set_factor(row.factor);
    r->set_interval_seconds(row.waste.interval_seconds);
    r->set_write_tax_fraction(row.waste.write_tax_fraction);
    r->set_rework_fraction(row.waste.rework_fraction);
    r->set_total_waste_fraction(row.waste.total_waste_fraction);
    r->set_goodput_fraction(row.waste.goodput_fraction);
    r->set_write_overlaps_next(row.write_overlaps_next);
  }
  out.set_verdict(CheckpointVerdictName(plan.verdict));
  out.set_verdict_text(plan.verdict_text);
  if (plan.verdict == CheckpointVerdict::kCheckpointEvery) {
    out.set_recommended_interval_seconds(plan.interval_seconds);
  }
  for (const std::string& w : plan.warnings) out.add_warnings(w);
  return out;
}

absl::StatusOr<std::string> RunPlanCommand(const PlanFlags& flags, bool json) {
  absl::StatusOr<CheckpointPlanInputs> inputs = PlanInputsFromFlags(flags);
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<CheckpointPlan> plan = PlanCheckpoints(*inputs);
  if (!plan.ok()) return plan.status();
  if (json) return RenderJson(CheckpointPlanToProto(flags, *plan));
  return RenderCheckpointPlanTable(flags, *plan);
}

absl::Status CheckBudgetFlags(const ComputeBudgetInputs& f) {
  if (!Positive(f.compute_samples_per_second)) {
    return BadFlag("--compute-samples-per-second", "a rate > 0", f.compute_samples_per_second);
  }
  if (!Positive(f.loader_samples_per_second)) {
    return BadFlag("--loader-samples-per-second", "a rate > 0", f.loader_samples_per_second);
  }
  if (f.gpus.has_value() && *f.gpus < 1) return BadFlag("--gpus", "at least 1", *f.gpus);
  if (f.price_per_gpu_hour.has_value() && !NonNegative(*f.price_per_gpu_hour)) {
    return BadFlag("--price-per-gpu-hour", "a price >= 0", *f.price_per_gpu_hour);
  }
  if (f.useful_gpu_hours.has_value() && !Positive(*f.useful_gpu_hours)) {
    return BadFlag("--useful-gpu-hours", "a number of GPU-hours > 0", *f.useful_gpu_hours);
  }
  if (!f.useful_gpu_hours.has_value() && (f.gpus.has_value() || f.price_per_gpu_hour.has_value())) {
    return absl::InvalidArgumentError(
        "--gpus and --price-per-gpu-hour need --useful-gpu-hours (the GPU-hours of pure compute "
        "the run needs)");
  }
  return absl::OkStatus();
}

namespace {

std::string Rate(double samples_per_second) {
  return absl::StrFormat("%.6g samples/s", samples_per_second);
}
std::string PerSample(double seconds) {
  if (seconds >= 1) return absl::StrFormat("%.3gs", seconds);
  if (seconds >= 1e-3) return absl::StrFormat("%.1fms", seconds * 1e3);
  return absl::StrFormat("%.1fus", seconds * 1e6);
}
std::string Hours(double hours) { return absl::StrFormat("%.1f", hours); }
std::string Money(double amount) { return absl::StrFormat("%.2f", amount); }

}  // namespace

std::string RenderComputeBudgetTable(const ComputeBudget& b) {
  const ComputeBudgetInputs& in = b.inputs;
  std::string out;
  out += Line("compute", absl::StrFormat("%s (%s per sample)", Rate(in.compute_samples_per_second),
                                         PerSample(b.compute_seconds_per_sample)));
  out += Line("loader", absl::StrFormat("%s (%s per sample), %s",
                                        Rate(in.loader_samples_per_second),
                                        PerSample(b.loader_seconds_per_sample),
                                        in.overlap ? "overlapped with compute (prefetch)"
                                                   : "not overlapped: loading adds to each step"));
  std::string pace = b.loader_bound ? "the loader sets the pace"
                     : in.overlap   ? "compute sets the pace"
                                    : "compute + loading";
  out += Line("per sample", absl::StrFormat("%s (%s)", PerSample(b.seconds_per_sample), pace));
  out += Line("utilization", absl::StrFormat("%s (GPUs wait for data %s of the time)",
                                             Percent(b.utilization_fraction), Percent(b.idle_fraction)));
  out += Line("throughput", Rate(b.throughput_samples_per_second));
  if (b.wall_gpu_hours.has_value()) {
    out += Line("useful work", Hours(*in.useful_gpu_hours) + " GPU-hours");
    std::string wall = Hours(*b.wall_gpu_hours) + " GPU-hours";
    if (b.wall_hours.has_value()) {
      absl::StrAppend(&wall, " = ", Hours(*b.wall_hours), " h on ", *in.gpus,
                      *in.gpus == 1 ? " GPU" : " GPUs");
    }
    out += Line("wall time", wall);
  }
  if (b.cost.has_value()) {
    out += Line("cost", absl::StrFormat("%s at %s per GPU-hour, of which idle GPUs %s",
                                        Money(*b.cost), Money(*in.price_per_gpu_hour),
                                        Money(*b.idle_cost)));
  }
  out += "\n";
  std::vector<std::string> headers = {"LOADER", "SAMPLES_PER_S", "PER_SAMPLE", "UTILIZATION",
                                      "THROUGHPUT"};
  if (b.wall_gpu_hours.has_value()) headers.push_back("WALL_GPU_HOURS");
  if (b.cost.has_value()) headers.push_back("COST");
  Table table(headers);
  for (const ComputeBudgetPoint& p : b.sweep) {
    std::vector<std::string> row = {absl::StrReplaceAll(p.label, {{" ", ""}}),
                                    absl::StrFormat("%.6g", p.loader_samples_per_second),
                                    PerSample(p.seconds_per_sample), Percent(p.utilization_fraction),
                                    absl::StrFormat("%.6g", p.throughput_samples_per_second)};
    if (p.wall_gpu_hours.has_value()) row.push_back(Hours(*p.wall_gpu_hours));
    if (p.cost.has_value()) row.push_back(Money(*p.cost));
    table.AddRow(std::move(row));
  }
  out += table.Render();
  return out;
}

v1::ComputeBudgetResult ComputeBudgetToProto(const ComputeBudget& b) {
  const ComputeBudgetInputs& in = b.inputs;
  v1::ComputeBudgetResult out;
  out.set_compute_samples_per_second(in.compute_samples_per_second);
  out.set_loader_samples_per_second(in.loader_samples_per_second);
  out.set_overlap(in.overlap);
  if (in.gpus.has_value()) out.set_gpus(*in.gpus);
  if (in.price_per_gpu_hour.has_value()) out.set_price_per_gpu_hour(*in.price_per_gpu_hour);
  if (in.useful_gpu_hours.has_value()) out.set_useful_gpu_hours(*in.useful_gpu_hours);
  out.set_compute_seconds_per_sample(b.compute_seconds_per_sample);
  out.set_loader_seconds_per_sample(b.loader_seconds_per_sample);
  out.set_seconds_per_sample(b.seconds_per_sample);
  out.set_utilization_fraction(b.utilization_fraction);
  out.set_idle_fraction(b.idle_fraction);
  out.set_throughput_samples_per_second(b.throughput_samples_per_second);
  out.set_loader_bound(b.loader_bound);
  if (b.wall_gpu_hours.has_value()) out.set_wall_gpu_hours(*b.wall_gpu_hours);
  if (b.wall_hours.has_value()) out.set_wall_hours(*b.wall_hours);
  if (b.cost.has_value()) out.set_cost(*b.cost);
  if (b.idle_cost.has_value()) out.set_idle_cost(*b.idle_cost);
  for (const ComputeBudgetPoint& p : b.sweep) {
    v1::ComputeBudgetPoint* point = out.add_sweep();
    point->set_label(p.label);
    point->set_loader_samples_per_second(p.loader_samples_per_second);
    point->set_seconds_per_sample(p.seconds_per_sample);
    point->set_utilization_fraction(p.utilization_fraction);
    point->set_throughput_samples_per_second(p.throughput_samples_per_second);
    if (p.wall_gpu_hours.has_value()) point->set_wall_gpu_hours(*p.wall_gpu_hours);
    if (p.cost.has_value()) point->set_cost(*p.cost);
  }
  return out;
}

absl::StatusOr<std::string> RunBudgetCommand(const ComputeBudgetInputs& flags, bool json) {
  if (absl::Status s = CheckBudgetFlags(flags); !s.ok()) return s;
  absl::StatusOr<ComputeBudget> budget = PlanComputeBudget(flags);
  if (!budget.ok()) return budget.status();
  if (json) return RenderJson(ComputeBudgetToProto(*budget));
  return RenderComputeBudgetTable(*budget);
}

}  // namespace trainsup
