#ifndef TRAINSUP_CLI_DIAGNOSE_RENDER_H_
#define TRAINSUP_CLI_DIAGNOSE_RENDER_H_

#include <string>

#include "trainsup/v1/operator.pb.h"

namespace trainsup {

// `trainsupctl diagnose JOB`: the verdict and the job's goodput on top, then
// each check in the order walked, with its status and summary; a problem's
// fix, what trainsupd does about it, the command that shows more, and a
// hang's culprit stack below it.
std::string RenderDiagnosis(const v1::DiagnoseResponse& diagnosis);

}  // namespace trainsup

#endif  // TRAINSUP_CLI_DIAGNOSE_RENDER_H_
