#include "cli/provenance_render.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/render.h"
#include "common/provenance.h"

namespace trainsup {
namespace {

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string CodeLine(const v1::CodeVersion& code) {
  if (code.script().empty()) return "- (no .py script in the command)";
  if (code.repository().empty()) return absl::StrCat(code.script(), " (in no git repository)");
  std::string out = absl::StrCat(code.repository(), " @ ", OrDash(code.commit()));
  if (!code.dirty()) return out + " (clean)";
  absl::StrAppend(&out, " (dirty: ", code.modified_total(),
                  code.modified_total() == 1 ? " file" : " files", ")");
  return out;
}

void RenderNode(const v1::GenerationProvenance& r, std::string* out) {
  absl::StrAppend(out, "node ", r.node(), ", launched ",
                  absl::FormatTime("%Y-%m-%d %H:%M:%S UTC",
                                   absl::FromUnixMicros(static_cast<int64_t>(
                                       r.launched_unix_seconds() * 1e6)),
                                   absl::UTCTimeZone()),
                  "\n");
  absl::StrAppend(out, "  command     ", absl::StrJoin(r.command(), " "), "\n");
  absl::StrAppend(out, "  directory   ", OrDash(r.working_directory()), "\n");
  absl::StrAppend(out, "  code        ", CodeLine(r.code()), "\n");
  for (const std::string& f : r.code().modified()) absl::StrAppend(out, "    modified  ", f, "\n");
  if (r.code().modified_total() > static_cast<uint32_t>(r.code().modified_size())) {
    absl::StrAppend(out, "    ... and ", r.code().modified_total() - r.code().modified_size(),
                    " more\n");
  }
  if (r.env().empty()) absl::StrAppend(out, "  env         -\n");
  for (int i = 0; i < r.env_size(); ++i) {
    absl::StrAppend(out, i == 0 ? "  env         " : "              ", r.env(i).name(), "=",
                    r.env(i).value(), "\n");
  }
  absl::StrAppend(out, "  kernel      ", OrDash(r.kernel()), "\n");
  absl::StrAppend(out, "  driver      ", OrDash(r.driver()), "\n");
  if (!r.has_runtime()) {
    absl::StrAppend(out, "  runtime     - (the rank helper did not report)\n");
  } else {
    const v1::RuntimeProvenance& rt = r.runtime();
    absl::StrAppend(out, "  runtime     python ", OrDash(rt.python()), ", torch ",
                    OrDash(rt.torch()), ", cuda ", OrDash(rt.cuda()), ", nccl ", OrDash(rt.nccl()),
                    "\n");
    absl::StrAppend(out, "  world size  ", rt.world_size(), "\n");
    // A script that builds its Heartbeat before loading a checkpoint tells
    // nothing: step 0 and no path is "not told", not "a fresh start".
    const bool told = rt.resumed_step() != 0 || !rt.resumed_path().empty();
    absl::StrAppend(out, "  resumed     ",
                    told ? absl::StrCat("step ", rt.resumed_step())
                         : std::string("- (the script told the helper no start_step)"),
                    rt.resumed_path().empty() ? "" : absl::StrCat(" from ", rt.resumed_path()),
                    rt.resumed_hash().empty() ? "" : absl::StrCat(" (", rt.resumed_hash(), ")"),
                    "\n");
  }
  if (r.truncated()) {
    absl::StrAppend(out, "  (truncated: the record was larger than ", kMaxProvenanceBytes / 1024,
                    " KiB; lists were cut)\n");
  }
}

}  // namespace

std::string RenderProvenance(const v1::ProvenanceResponse& p) {
  std::vector<std::string> nodes;
  for (const v1::GenerationProvenance& r : p.nodes()) nodes.push_back(r.node());
  std::string out = absl::StrCat("provenance of generation ", p.generation(), " (",
                                 p.nodes_size(), p.nodes_size() == 1 ? " node: " : " nodes: ",
                                 absl::StrJoin(nodes, ", "), ")\n");
  if (p.has_first_step()) {
    const v1::FirstStep& s = p.first_step();
    absl::StrAppend(&out, "first step  ", s.step(), " (", s.ranks(),
                    s.ranks() == 1 ? " rank" : " ranks", "): learning rate ",
                    OrDash(FirstStepLearningRate(s)), ", ", s.samples(), " samples, ", s.tokens(),
                    " tokens\n");
  } else {
    absl::StrAppend(&out, "first step  - (trainsupd has seen none)\n");
  }
  for (const v1::GenerationProvenance& r : p.nodes()) RenderNode(r, &out);
  return out;
}

std::string RenderJobProvenance(const v1::JobProvenance& view) {
  return absl::StrCat(RenderJobDetail(view.job()), "\n", RenderProvenance(view.provenance()));
}

v1::ProvenanceDiff MakeProvenanceDiff(const v1::ProvenanceResponse& a,
                                      const v1::ProvenanceResponse& b) {
  v1::ProvenanceDiff diff;
  diff.set_job_a(a.job_id());
  diff.set_generation_a(a.generation());
  diff.set_job_b(b.job_id());
  diff.set_generation_b(b.generation());
  const std::vector<v1::GenerationProvenance> nodes_a(a.nodes().begin(), a.nodes().end());
  const std::vector<v1::GenerationProvenance> nodes_b(b.nodes().begin(), b.nodes().end());
  for (v1::ProvenanceDiff::Change& c : DiffProvenance(nodes_a, nodes_b)) {
    *diff.add_changes() = std::move(c);
  }
  for (v1::ProvenanceDiff::Change& c :
       DiffFirstStep(a.has_first_step() ? &a.first_step() : nullptr,
                     b.has_first_step() ? &b.first_step() : nullptr)) {
    *diff.add_changes() = std::move(c);
  }
  return diff;
}

std::string RenderProvenanceDiff(const v1::ProvenanceDiff& d) {
  std::string out = absl::StrCat(d.job_a(), " generation ", d.generation_a(), " -> ", d.job_b(),
                                 " generation ", d.generation_b(), ": ");
  if (d.changes().empty()) {
    return out + "no difference in command, code, environment, versions, world size, nodes or "
                 "first step\n";
  }
  absl::StrAppend(&out, d.changes_size(), d.changes_size() == 1 ? " change\n" : " changes\n");
  for (const v1::ProvenanceDiff::Change& c : d.changes()) {
    std::string what = c.name().empty() ? c.field() : absl::StrCat(c.field(), " ", c.name());
    if (what.size() < 24) what.resize(24, ' ');
    switch (c.kind()) {
      case v1::ProvenanceDiff::Change::KIND_ADDED:
        absl::StrAppend(&out, what, "  + ", c.b(), "\n");
        break;
      case v1::ProvenanceDiff::Change::KIND_REMOVED:
        absl::StrAppend(&out, what, "  - ", c.a(), "\n");
        break;
      default:
        absl::StrAppend(&out, what, "  ", OrDash(c.a()), " -> ", OrDash(c.b()), "\n");
    }
  }
  return out;
}

}  // namespace trainsup
