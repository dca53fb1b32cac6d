#ifndef TRAINSUP_AGENT_PROVENANCE_H_
#define TRAINSUP_AGENT_PROVENANCE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "trainsup/v1/heartbeat.pb.h"
#include "trainsup/v1/provenance.pb.h"

// What the agent records of each launch (docs/provenance.md). The pure parts
// (which variables, which script, git's answers) are apart from the capture,
// which reads the process's environment, runs git and reads the kernel's
// files.
namespace trainsup {

// The environment variables recorded by default, as fnmatch(3) patterns.
const std::vector<std::string>& DefaultProvenanceEnv();

// The variables of `environment` ("NAME=VALUE" entries) whose name matches a
// default pattern or one of `patterns`, sorted by name, each value cut to
// 4 KiB. A name that looks like a secret's (IsSecretName) is left out
// whatever the patterns say: neither its name nor its value is recorded.
std::vector<v1::EnvVar> SelectEnvironment(const std::vector<std::string>& environment,
                                          const std::vector<std::string>& patterns);

// The script a command runs: its first argument that ends in ".py" (after
// the program itself: torchrun's or python's). Empty when there is none
// (`python -m module`: no file to version).
std::string FindScript(const std::vector<std::string>& argv);

// The files `git status --porcelain` lists (v1 format: "XY path", a rename
// "XY old -> new" as the new path), at most `max_files` of at most 256
// bytes each; `*total` counts them all.
std::vector<std::string> PorcelainFiles(absl::string_view porcelain, size_t max_files,
                                        uint32_t* total);

struct ProvenanceOptions {
  // --provenance-env: more fnmatch(3) patterns of variables to record.
  std::vector<std::string> env_patterns;
  // Each git command's time limit. Default: 1s.
  absl::Duration git_timeout = absl::Seconds(1);
};

// The record of one launch: `argv` as launched with `extra_env` added to
// this process's environment (the launched command's), the working
// directory, the script's git version (never failing: what git could not
// tell stays empty), the kernel and the NVIDIA driver. The node is left
// for trainsupd. Runs git as a child and waits for it (at most two
// commands, each within the timeout).
v1::GenerationProvenance CaptureProvenance(
    uint64_t generation, const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& extra_env,
    const ProvenanceOptions& options);

// Takes the rank helper's record (a PROVENANCE heartbeat) into `record`,
// the node's record of the generation it launched: the generation's first
// one whole (another generation's is not this launch's); after it, only the
// checkpoint hash the helper computed on request (docs/provenance.md), for
// the same checkpoint, once. Returns whether `record` changed (it then goes
// up again).
bool MergeRankProvenance(const v1::RankHeartbeat& hb, v1::GenerationProvenance* record);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_PROVENANCE_H_
