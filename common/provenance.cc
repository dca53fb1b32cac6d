#include "common/provenance.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainsup {
namespace {

using Change = v1::ProvenanceDiff::Change;
using Record = v1::GenerationProvenance;

// The longest string a bounded record keeps.
constexpr size_t kMaxCutString = 256;

void CutString(std::string* s) {
  if (s->size() > kMaxCutString) s->resize(kMaxCutString);
}

// One field's value in a generation: the value when its nodes agree, else
// each value with its nodes ("v1 (n1,n2); v2 (n3)").
std::string Collapse(const std::map<std::string, std::string>& by_node) {
  std::map<std::string, std::vector<std::string>> nodes_of;
  for (const auto& [node, value] : by_node) nodes_of[value].push_back(node);
  if (nodes_of.size() <= 1) return nodes_of.empty() ? "" : nodes_of.begin()->first;
  std::vector<std::string> parts;
  for (const auto& [value, nodes] : nodes_of) {
    parts.push_back(absl::StrCat(value, " (", absl::StrJoin(nodes, ","), ")"));
  }
  return absl::StrJoin(parts, "; ");
}

std::string ValueOf(const std::vector<Record>& records,
                    const std::function<std::string(const Record&)>& field) {
  std::map<std::string, std::string> by_node;
  for (const Record& r : records) by_node[r.node()] = field(r);
  return Collapse(by_node);
}

// Per name within a field (a variable, a file): the value in the
// generation, over the nodes that have the name ("<unset>" on the others).
std::map<std::string, std::string> NamedValues(
    const std::vector<Record>& records,
    const std::function<std::vector<std::pair<std::string, std::string>>(const Record&)>& named) {
  std::map<std::string, std::map<std::string, std::string>> by_name;
  for (const Record& r : records) {
    for (const auto& [name, value] : named(r)) by_name[name][r.node()] = value;
  }
  std::map<std::string, std::string> out;
  for (auto& [name, by_node] : by_name) {
    for (const Record& r : records) by_node.emplace(r.node(), "<unset>");
    out[name] = Collapse(by_node);
  }
  return out;
}

Change MakeChange(absl::string_view field, absl::string_view name, Change::Kind kind,
                  absl::string_view a, absl::string_view b) {
  Change c;
  c.set_field(std::string(field));
  c.set_name(std::string(name));
  c.set_kind(kind);
  c.set_a(std::string(a));
  c.set_b(std::string(b));
  return c;
}

void DiffNamed(absl::string_view field, const std::map<std::string, std::string>& a,
               const std::map<std::string, std::string>& b, std::vector<Change>* out) {
  std::set<std::string> names;
  for (const auto& [name, value] : a) names.insert(name);
  for (const auto& [name, value] : b) names.insert(name);
  for (const std::string& name : names) {
    auto in_a = a.find(name);
    auto in_b = b.find(name);
    if (in_b == b.end()) {
      out->push_back(MakeChange(field, name, Change::KIND_REMOVED, in_a->second, ""));
    } else if (in_a == a.end()) {
      out->push_back(MakeChange(field, name, Change::KIND_ADDED, "", in_b->second));
    } else if (in_a->second != in_b->second) {
      out->push_back(MakeChange(field, name, Change::KIND_CHANGED, in_a->second, in_b->second));
    }
  }
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

std::vector<Change> DiffProvenance(const std::vector<Record>& a, const std::vector<Record>& b) {
  std::vector<Change> out;
  auto scalar = [&](absl::string_view field, const std::function<std::string(const Record&)>& f) {
    const std::string va = ValueOf(a, f);
    const std::string vb = ValueOf(b, f);
    if (va != vb) out.push_back(MakeChange(field, "", Change::KIND_CHANGED, va, vb));
  };
  scalar("command", [](const Record& r) { return absl::StrJoin(r.command(), " "); });
  scalar("working_directory", [](const Record& r) { return r.working_directory(); });
  scalar("code.commit", [](const Record& r) { return r.code().commit(); });
  scalar("code.dirty", [](const Record& r) { return r.code().dirty() ? "true" : "false"; });
  auto modified = [](const Record& r) {
    std::vector<std::pair<std::string, std::string>> files;
    for (const std::string& f : r.code().modified()) files.emplace_back(f, "modified");
    return files;
  };
  DiffNamed("code.modified", NamedValues(a, modified), NamedValues(b, modified), &out);
  auto env = [](const Record& r) {
    std::vector<std::pair<std::string, std::string>> vars;
    for (const v1::EnvVar& v : r.env()) vars.emplace_back(v.name(), v.value());
    return vars;
  };
  DiffNamed("env", NamedValues(a, env), NamedValues(b, env), &out);
  scalar("kernel", [](const Record& r) { return r.kernel(); });
  scalar("driver", [](const Record& r) { return r.driver(); });
  scalar("python", [](const Record& r) { return r.runtime().python(); });
  scalar("torch", [](const Record& r) { return r.runtime().torch(); });
  scalar("cuda", [](const Record& r) { return r.runtime().cuda(); });
  scalar("nccl", [](const Record& r) { return r.runtime().nccl(); });
  scalar("world_size", [](const Record& r) {
    return r.has_runtime() ? absl::StrCat(r.runtime().world_size()) : std::string();
  });
  auto nodes = [](const std::vector<Record>& records) {
    std::map<std::string, std::string> out;
    for (const Record& r : records) out[r.node()] = "launched";
    return out;
  };
  DiffNamed("nodes", nodes(a), nodes(b), &out);
  return out;
}

std::string FirstStepLearningRate(const v1::FirstStep& step) {
  return step.has_learning_rate() ? absl::StrFormat("%.9g", step.learning_rate()) : "";
}

std::vector<Change> DiffFirstStep(const v1::FirstStep* a, const v1::FirstStep* b) {
  std::vector<Change> out;
  if (a == nullptr && b == nullptr) return out;
  auto scalar = [&](absl::string_view field,
                    const std::function<std::string(const v1::FirstStep&)>& f) {
    const std::string va = a == nullptr ? "" : f(*a);
    const std::string vb = b == nullptr ? "" : f(*b);
    if (va != vb) out.push_back(MakeChange(field, "", Change::KIND_CHANGED, va, vb));
  };
  scalar("first_step.learning_rate", FirstStepLearningRate);
  scalar("first_step.samples", [](const v1::FirstStep& s) { return absl::StrCat(s.samples()); });
  scalar("first_step.tokens", [](const v1::FirstStep& s) { return absl::StrCat(s.tokens()); });
  return out;
}

}  // namespace trainsup
