#ifndef TRAINSUP_AGENT_DCGM_JOB_MAPPING_H_
#define TRAINSUP_AGENT_DCGM_JOB_MAPPING_H_

// dcgm-exporter's HPC job mapping (docs/gpu.md, "GPU metrics by job"): in a
// directory the exporter reads (--hpc-job-mapping-dir, or
// DCGM_HPC_JOB_MAPPING_DIR), one file a GPU, named by its index, holding the
// ids of the jobs that run on it, one a line. The exporter then labels that
// GPU's series with the job (`hpc_job`), so operators join them with
// trainsup's own without Kubernetes.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/gpu_inventory.h"

namespace trainsup {

// The GPUs this node's job runs on, by nvidia-smi index: those
// CUDA_VISIBLE_DEVICES names (`visible`: indices, or UUIDs found in `gpus`),
// or every GPU nvidia-smi listed when it is unset. Empty when neither says.
std::vector<int> JobGpuIndices(const std::optional<std::string>& visible,
                               const std::vector<GpuInfo>& gpus);

// Writes `job` into the file of each GPU of `indices` under `directory`
// (each replaced whole, by a rename: the exporter never reads half a file).
absl::Status WriteJobMapping(const std::string& directory, const std::vector<int>& indices,
                             const std::string& job);

// Removes the files of `indices` that still name `job` (another job's are
// left alone).
void RemoveJobMapping(const std::string& directory, const std::vector<int>& indices,
                      const std::string& job);

}  // namespace trainsup

#endif  // TRAINSUP_AGENT_DCGM_JOB_MAPPING_H_
