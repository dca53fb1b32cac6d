#include "agent/plan_file.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"

namespace trainsup {

PlanFile::PlanFile(std::string path) : path_(std::move(path)) {}

absl::Status PlanFile::Add(const v1::CheckpointPlan& plan) {
  absl::MutexLock lock(&mu_);
  for (const v1::CheckpointPlan& held : plans_.plans()) {
    if (held.plan_id() == plan.plan_id()) return written_ ? absl::OkStatus() : WriteLocked();
  }
  *plans_.add_plans() = plan;
  written_ = false;
  return WriteLocked();
}

absl::Status PlanFile::Rewrite() {
  absl::MutexLock lock(&mu_);
  return written_ ? absl::OkStatus() : WriteLocked();
}

absl::Status PlanFile::WriteLocked() {
  google::protobuf::util::JsonPrintOptions json;
  json.preserve_proto_field_names = true;
  json.always_print_primitive_fields = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(plans_, &text, json).ok()) {
    return absl::InternalError("cannot print the checkpoint plans as JSON");
  }
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text << "\n";
    out.flush();
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write the plan file ", tmp));
  }
  if (rename(tmp.c_str(), path_.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, ": ", strerror(errno)));
  }
  written_ = true;
  for (const v1::CheckpointPlan& p : plans_.plans()) {
    held_through_ = std::max(held_through_, p.plan_id());
  }
  return absl::OkStatus();
}

v1::CheckpointPlans PlanFile::plans() const {
  absl::MutexLock lock(&mu_);
  return plans_;
}

uint64_t PlanFile::held_through() const {
  absl::MutexLock lock(&mu_);
  return held_through_;
}

}  // namespace trainsup
