#include "daemon/store/schema.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "daemon/store/table_codec.h"

namespace trainsup {
namespace store {

const std::vector<const TableCodec*>& Tables() {
  static const auto* const kTables = new std::vector<const TableCodec*>{
      &NodesTable(),       &FailuresTable(),  &RestartsTable(),
      &JobsTable(),        &EventsTable(),    &JobMeasuresTable(),
      &StacksTable(),      &PendingFencesTable(), &EndedJobsTable(),
      &FallbacksTable(),
      &KillCriteriaTable(),
      &ProvenanceTable(),
  };
  return *kTables;
}

namespace {

constexpr const char* kCreateMeta =
    "CREATE TABLE meta (  key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)";

absl::Status SetVersion(const Db& db, const char* sql, int version, absl::string_view doing) {
  Statement statement(db, sql);
  statement.BindInt(1, version);
  return statement.Run(doing);
}

absl::Status Create(const Db& db) {
  std::vector<const char*> statements = {kCreateMeta};
  for (const TableCodec* table : Tables()) {
    statements.insert(statements.end(), table->create.begin(), table->create.end());
  }
  for (const char* sql : statements) {
    if (absl::Status s = Exec(db, sql, "creating the schema"); !s.ok()) return s;
  }
  return SetVersion(db, "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)",
                    kSchemaVersion, "creating the schema");
}

// Takes the database from `version` - 1 to `version`.
absl::Status Migrate(const Db& db, int version) {
  const std::string doing =
      absl::StrCat("migrating schema version ", version - 1, " to ", version);
  for (const TableCodec* table : Tables()) {
    for (const auto& [to, statements] : table->migrations) {
      if (to != version) continue;
      for (const char* sql : statements) {
        if (absl::Status s = Exec(db, sql, doing); !s.ok()) return s;
      }
    }
  }
  absl::Status status =
      SetVersion(db, "UPDATE meta SET value = ?1 WHERE key = 'schema_version'", version, doing);
  if (status.ok()) {
    TRAINSUP_LOG_INFO("state database %s: schema version %d migrated to %d", db.path, version - 1,
                      version);
  }
  return status;
}

}  // namespace

absl::Status CheckSchema(const Db& db, SchemaCheck* found) {
  std::vector<std::string> tables;
  Statement list(db,
                 "SELECT name FROM sqlite_master WHERE type = 'table'"
                 " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name");
  absl::Status status =
      ForEachRow(db, list, [&](Statement& row) { tables.push_back(row.Text(0)); });
  if (!status.ok()) return status;
  found->empty = tables.empty();
  if (found->empty) return absl::OkStatus();

  if (std::find(tables.begin(), tables.end(), "meta") == tables.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", db.path, " is not a trainsup database: it has tables (",
                     absl::StrJoin(tables, ", "), ") but no meta table"));
  }
  std::optional<std::string> version;
  Statement select(db, "SELECT value FROM meta WHERE key = 'schema_version'");
  status = ForEachRow(db, select, [&](Statement& row) { version = row.Text(0); });
  if (!status.ok()) return status;
  if (!version.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("state database ", db.path,
                     " is not a trainsup database: its meta table has no schema_version"));
  }
  int number = 0;
  if (!absl::SimpleAtoi(*version, &number) || number < 1 || number > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state database ", db.path, " has schema version ", *version,
        " but this trainsupd reads schema versions 1 to ", kSchemaVersion,
        "; run a matching trainsupd, or move the file away to start with an empty state"));
  }
  found->version = number;
  return absl::OkStatus();
}

absl::Status CreateOrMigrate(const Db& db, const SchemaCheck& found) {
  if (found.empty) return Create(db);
  for (int version = found.version + 1; version <= kSchemaVersion; ++version) {
    if (absl::Status s = Migrate(db, version); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace store
}  // namespace trainsup
