#ifndef TRAINSUP_DAEMON_STORE_SCHEMA_H_
#define TRAINSUP_DAEMON_STORE_SCHEMA_H_

#include "absl/status/status.h"
#include "daemon/store/sqlite.h"

namespace trainsup {
namespace store {

// The schema version this build writes: the version of the newest change of
// any table (table_codec.h). A new table, or a change to one, takes the
// next version.
constexpr int kSchemaVersion = 9;

// What is in the database: nothing yet, or a trainsup schema of a version
// this build reads.
struct SchemaCheck {
  bool empty = false;
  int version = 0;  // when not empty: 1 .. kSchemaVersion
};

// Reads only. FailedPrecondition for a database of another program (tables,
// but no trainsup meta table) or of a newer schema version.
absl::Status CheckSchema(const Db& db, SchemaCheck* found);

// Creates the newest schema in an empty database, or migrates an older one
// version by version (each step logged). REQUIRES: inside a write
// transaction, so that it is all or nothing.
absl::Status CreateOrMigrate(const Db& db, const SchemaCheck& found);

}  // namespace store
}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_STORE_SCHEMA_H_
