// The provenance table: what each node launched for each generation of a
// job (docs/provenance.md). Written as records arrive, not through the
// journal (the core decides nothing on them), and read on request, never
// loaded at start-up.
#include "daemon/store/provenance.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {
namespace {

constexpr const char* kCreateProvenance =
    "CREATE TABLE provenance ("
    "  job TEXT NOT NULL, generation INTEGER NOT NULL, node TEXT NOT NULL, time REAL,"
    "  record TEXT NOT NULL, PRIMARY KEY (job, generation, node))";

absl::Status Write(const Db&, const Journal&) { return absl::OkStatus(); }
absl::Status Read(const Db&, const LoadLimits&, PersistedState*) { return absl::OkStatus(); }

}  // namespace

absl::Status PutProvenance(const Db& db, const std::string& job,
                           const v1::GenerationProvenance& record, absl::Time now) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(record, &json, options).ok()) {
    return absl::InvalidArgumentError("provenance record not expressible as JSON");
  }
  Statement upsert(db, record.node().empty()
                           ? "INSERT OR IGNORE INTO provenance (job, generation, node, time, record)"
                             " VALUES (?1, ?2, ?3, ?4, ?5)"
                           : "INSERT OR REPLACE INTO provenance (job, generation, node, time, record)"
                             " VALUES (?1, ?2, ?3, ?4, ?5)");
  upsert.BindText(1, job);
  upsert.BindUint(2, record.generation());
  upsert.BindText(3, record.node());
  upsert.BindTime(4, now);
  upsert.BindText(5, json);
  return upsert.Run("storing a generation's provenance");
}

absl::Status ReadProvenance(const Db& db, const std::string& job, uint64_t generation,
                            std::vector<v1::GenerationProvenance>* records) {
  Statement select(db,
                   "SELECT node, record FROM provenance WHERE job = ?1 AND generation = ?2"
                   " ORDER BY node");
  select.BindText(1, job);
  select.BindUint(2, generation);
  bool unreadable = false;
  absl::Status status = ForEachRow(db, select, [&](Statement& row) {
    v1::GenerationProvenance& r = records->emplace_back();
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = true;  // a newer trainsupd's fields
    unreadable |= !google::protobuf::util::JsonStringToMessage(row.Text(1), &r, options).ok();
    r.set_node(row.Text(0));
  });
  if (!status.ok()) return status;
  if (unreadable) {
    return absl::DataLossError(absl::StrCat("state database ", db.path, ": a provenance record of job ",
                                            job, " generation ", generation, " is not readable"));
  }
  return absl::OkStatus();
}

const TableCodec& ProvenanceTable() {
  static const TableCodec* const kCodec = new TableCodec{
      {kCreateProvenance},
      {
          // Generations' provenance.
          {8, {kCreateProvenance}},
      },
      Write,
      Read,
      {"DELETE FROM provenance WHERE time < ?1"},
  };
  return *kCodec;
}

}  // namespace store
}  // namespace trainsup
