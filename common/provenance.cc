#include "common/provenance.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace trainsup {
namespace {

// The longest string a bounded record keeps.
constexpr size_t kMaxCutString = 256;

void CutString(std::string* s) {
  if (s->size() > kMaxCutString) s->resize(kMaxCutString);
}

}  // namespace

bool IsSecretName(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  for (absl::string_view word : {"TOKEN", "SECRET", "KEY", "PASSWORD"}) {
    if (absl::StrContains(upper, word)) return true;
  }
  return false;
}

int DropSecrets(v1::GenerationProvenance* record) {
  auto* env = record->mutable_env();
  const int before = env->size();
  env->erase(std::remove_if(env->begin(), env->end(),
                            [](const v1::EnvVar& v) { return IsSecretName(v.name()); }),
             env->end());
  return before - env->size();
}

bool BoundProvenance(v1::GenerationProvenance* record, size_t max_bytes) {
  auto fits = [&] { return record->ByteSizeLong() <= max_bytes; };
  if (fits()) return true;
  record->set_truncated(true);
  v1::CodeVersion* code = record->mutable_code();
  while (!fits() && code->modified_size() > 0) code->mutable_modified()->RemoveLast();
  for (v1::EnvVar& v : *record->mutable_env()) CutString(v.mutable_value());
  while (!fits() && record->env_size() > 0) record->mutable_env()->RemoveLast();
  for (std::string& arg : *record->mutable_command()) CutString(&arg);
  while (!fits() && record->command_size() > 0) record->mutable_command()->RemoveLast();
  for (std::string* s : {record->mutable_working_directory(), code->mutable_script(),
                         code->mutable_repository(), record->mutable_kernel(),
                         record->mutable_driver()}) {
    CutString(s);
  }
  return fits();
}

}  // namespace trainsup
