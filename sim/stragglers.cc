#include "sim/stragglers.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace trainsup::sim {

std::vector<StragglerPoint> StragglerLoss(const std::vector<uint64_t>& ranks, double sigma,
                                          int trials, uint64_t seed) {
  std::vector<StragglerPoint> out;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0, 1);
  // A rank's own mean step: E[exp(sigma Z)] = exp(sigma^2 / 2).
  const double rank_mean = std::exp(sigma * sigma / 2);
  for (uint64_t n : ranks) {
    double sum = 0;
    for (int t = 0; t < trials; ++t) {
      double slowest = 0;
      for (uint64_t r = 0; r < n; ++r) slowest = std::max(slowest, z(rng));
      sum += std::exp(sigma * slowest);
    }
    StragglerPoint p;
    p.ranks = n;
    p.mean_step = trials > 0 ? sum / trials : 0;
    p.throughput_loss = p.mean_step > 0 ? 1 - rank_mean / p.mean_step : 0;
    out.push_back(p);
  }
  return out;
}

}  // namespace trainsup::sim
