#ifndef TRAINSUP_CLI_PROVENANCE_RENDER_H_
#define TRAINSUP_CLI_PROVENANCE_RENDER_H_

#include <cstdint>
#include <string>

#include "trainsup/v1/operator.pb.h"
#include "trainsup/v1/provenance.pb.h"

namespace trainsup {

// The provenance section of `trainsupctl job JOB --generation N`: each
// node's record (docs/provenance.md).
std::string RenderProvenance(const v1::ProvenanceResponse& provenance);

// `trainsupctl job JOB --generation N`: the job, then its provenance.
std::string RenderJobProvenance(const v1::JobProvenance& view);

// What differs from generation A to generation B (DiffProvenance).
v1::ProvenanceDiff MakeProvenanceDiff(const v1::ProvenanceResponse& a,
                                      const v1::ProvenanceResponse& b);

// `trainsupctl diff`: one line per change, "FIELD [NAME]  A -> B" ("+ B"
// added, "- A" removed), or a line saying nothing differs.
std::string RenderProvenanceDiff(const v1::ProvenanceDiff& diff);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_PROVENANCE_RENDER_H_
