#include "cli/diagnose_render.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/format.h"

namespace trainsup {

std::string RenderDiagnosis(const v1::DiagnoseResponse& d) {
  const v1::LedgerBuckets& ledger = d.ledger();
  std::string out = absl::StrCat("job ", d.job_id(), ": ", d.verdict(), "\n  ", d.headline(),
                                 "\n");
  // A finished job's goodput is final; any other's is so far.
  absl::StrAppend(&out, "state ", d.state(), "; goodput ", Percent(ledger.goodput_fraction()),
                  d.state() == "finished" ? "" : " so far", " (useful ",
                  HumanSeconds(ledger.useful_seconds()), " of ",
                  HumanSeconds(ledger.wall_seconds()), ")\n\n");
  int n = 0;
  for (const v1::Finding& f : d.findings()) {
    const bool problem = f.status() == "problem";
    absl::StrAppendFormat(&out, "%d %-13s %-8s %s\n", ++n, f.check(),
                          problem ? "PROBLEM" : f.status(), f.summary());
    const std::string indent(25, ' ');
    if (!f.handling().empty()) absl::StrAppend(&out, indent, "trainsupd: ", f.handling(), "\n");
    if (problem && !f.fix().empty()) absl::StrAppend(&out, indent, "fix: ", f.fix(), "\n");
    if (problem && !f.command().empty()) {
      absl::StrAppend(&out, indent, "more: ", f.command(), "\n");
    }
    if (!f.stack().empty()) {
      absl::StrAppend(&out, indent, "stack of the culprit:\n");
      for (absl::string_view line : absl::StrSplit(f.stack(), '\n')) {
        if (!line.empty()) absl::StrAppend(&out, indent, "  ", line, "\n");
      }
    }
  }
  return out;
}

}  // namespace trainsup
