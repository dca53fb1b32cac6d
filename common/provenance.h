#ifndef TRAINSUP_COMMON_PROVENANCE_H_
#define TRAINSUP_COMMON_PROVENANCE_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainsup/v1/provenance.pb.h"

// The pure parts of a generation's provenance (docs/provenance.md) that the
// agent, trainsupd and trainsupctl share: which names are secrets, how a
// record is bounded, and what differs between two generations.
namespace trainsup {

// The most a stored record may take, serialized. Default of trainsupd.
constexpr size_t kMaxProvenanceBytes = 64 * 1024;

// Whether an environment variable's name looks like a secret's: it holds
// TOKEN, SECRET, KEY or PASSWORD, in any case. Such a variable is never
// recorded, neither its value nor its name.
bool IsSecretName(absl::string_view name);

// Drops every variable of `record` whose name is a secret's. Returns how
// many were dropped.
int DropSecrets(v1::GenerationProvenance* record);

// Cuts `record` until it serializes to at most `max_bytes`: first the list
// of modified files, then the environment (from its end), then the command's
// arguments, each string to 256 bytes; sets `truncated` when anything was
// cut. Returns whether the record now fits (a record of nothing but huge
// scalars may not).
bool BoundProvenance(v1::GenerationProvenance* record, size_t max_bytes = kMaxProvenanceBytes);

// What differs between generation A's records (one per node) and B's: the
// command, working directory, code version and modified files, environment
// (added, removed, changed), kernel, driver, Python/torch/CUDA/NCCL
// versions, world size and node set. What a generation resumed is not
// compared (every restart resumes elsewhere). Changes come in that order,
// names sorted within a field.
std::vector<v1::ProvenanceDiff::Change> DiffProvenance(
    const std::vector<v1::GenerationProvenance>& a,
    const std::vector<v1::GenerationProvenance>& b);

// What differs between two generations' first steps (null: none seen):
// the learning rate, the samples and the tokens, not the step (every
// restart resumes elsewhere). A value not there reads as "".
std::vector<v1::ProvenanceDiff::Change> DiffFirstStep(const v1::FirstStep* a,
                                                      const v1::FirstStep* b);

// A first step's learning rate as shown and compared (9 significant
// digits); "" when none was sent.
std::string FirstStepLearningRate(const v1::FirstStep& step);

}  // namespace trainsup

#endif  // TRAINSUP_COMMON_PROVENANCE_H_
