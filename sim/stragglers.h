#ifndef TRAINSUP_SIM_STRAGGLERS_H_
#define TRAINSUP_SIM_STRAGGLERS_H_

#include <cstdint>
#include <vector>

namespace trainsup::sim {

// The straggler model of the course module: each rank's step time is drawn
// independently from a log-normal distribution of median 1 and log-space
// standard deviation `sigma`; a synchronous job steps at its slowest rank.
struct StragglerPoint {
  uint64_t ranks = 0;
  double mean_step = 0;        // E[max over ranks], in medians
  double throughput_loss = 0;  // 1 - E[rank's step] / E[job's step]
};

// The loss for each of `ranks`, by seeded Monte Carlo over `trials` steps.
std::vector<StragglerPoint> StragglerLoss(const std::vector<uint64_t>& ranks, double sigma,
                                          int trials, uint64_t seed);

}  // namespace trainsup::sim

#endif  // TRAINSUP_SIM_STRAGGLERS_H_
