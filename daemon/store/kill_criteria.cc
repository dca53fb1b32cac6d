// The kill_criteria table: each job's kill criteria, by source ("script",
// "operator"), the latest of each; a cleared one is deleted.
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateKillCriteria =
    "CREATE TABLE kill_criteria ("
    "  job TEXT NOT NULL, source TEXT NOT NULL, loss_above REAL, at_step INTEGER NOT NULL,"
    "  curve TEXT NOT NULL, band REAL NOT NULL, band_absolute INTEGER NOT NULL,"
    "  spikes INTEGER NOT NULL, total_steps INTEGER, observe_only INTEGER NOT NULL,"
    "  changed REAL, PRIMARY KEY (job, source))";

// A curve as "step:loss,step:loss", each loss to the last bit.
std::string CurveText(const std::vector<CurvePoint>& curve) {
  std::string out;
  for (const CurvePoint& p : curve) {
    absl::StrAppend(&out, out.empty() ? "" : ",", p.step, ":", absl::StrFormat("%.17g", p.loss));
  }
  return out;
}

std::vector<CurvePoint> CurveOf(absl::string_view text) {
  std::vector<CurvePoint> curve;
  for (absl::string_view point : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> parts = absl::StrSplit(point, ':');
    CurvePoint p;
    if (absl::SimpleAtoi(parts.first, &p.step) && absl::SimpleAtod(parts.second, &p.loss)) {
      curve.push_back(p);
    }
  }
  return curve;
}

absl::Status Write(const Db& db, const Journal& journal) {
  if (journal.kill_criteria.empty()) return absl::OkStatus();
  Statement upsert(db,
                   "INSERT OR REPLACE INTO kill_criteria (job, source, loss_above, at_step, curve,"
                   " band, band_absolute, spikes, total_steps, observe_only, changed)"
                   " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
  Statement clear(db, "DELETE FROM kill_criteria WHERE job = ?1 AND source = ?2");
  for (const KillCriteriaRow& row : journal.kill_criteria) {
    absl::Status s;
    if (row.spec) {
      const KillCriteriaSpec& spec = *row.spec;
      upsert.BindText(1, row.job);
      upsert.BindText(2, row.source);
      if (spec.loss_above) {
        upsert.BindDouble(3, *spec.loss_above);
      } else {
        upsert.BindNull(3);
      }
      upsert.BindInt(4, spec.at_step);
      upsert.BindText(5, CurveText(spec.curve));
      upsert.BindDouble(6, spec.band);
      upsert.BindBool(7, spec.band_absolute);
      upsert.BindInt(8, spec.spikes);
      if (spec.total_steps) {
        upsert.BindInt(9, *spec.total_steps);
      } else {
        upsert.BindNull(9);
      }
      upsert.BindBool(10, spec.observe_only);
      upsert.BindTime(11, row.changed);
      s = upsert.Run("writing the journal");
    } else {
      clear.BindText(1, row.job);
      clear.BindText(2, row.source);
      s = clear.Run("writing the journal");
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Read(const Db& db, const LoadLimits&, PersistedState* state) {
  Statement select(db,
                   "SELECT job, source, loss_above, at_step, curve, band, band_absolute, spikes,"
                   " total_steps, observe_only, changed FROM kill_criteria ORDER BY job, source");
  return ForEachRow(db, select, [&](Statement& row) {
    KillCriteriaRow& out = state->kill_criteria.emplace_back();
    out.job = row.Text(0);
    out.source = row.Text(1);
    KillCriteriaSpec& spec = out.spec.emplace();
    if (!row.IsNull(2)) spec.loss_above = row.Double(2);
    spec.at_step = row.Int(3);
    spec.curve = CurveOf(row.Text(4));
    spec.band = row.Double(5);
    spec.band_absolute = row.Int(6) != 0;
    spec.spikes = static_cast<uint32_t>(row.Int(7));
    if (!row.IsNull(8)) spec.total_steps = row.Int(8);
    spec.observe_only = row.Int(9) != 0;
    out.changed = row.Time(10);
  });
}

}  // namespace

const TableCodec& KillCriteriaTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {kCreateKillCriteria},
      {
          // Kill criteria (docs/kill-criteria.md) survive a restart.
          {7, {kCreateKillCriteria}},
      },
      Write,
      Read,
      // A job's criteria go with the job (pruned before them).
      {"DELETE FROM kill_criteria WHERE changed < ?1 AND job NOT IN (SELECT job FROM jobs)"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
