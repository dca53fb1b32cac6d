#ifndef TRAINSUP_TESTS_SUPPORT_HEALTHY_LOSS_H_
#define TRAINSUP_TESTS_SUPPORT_HEALTHY_LOSS_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace trainsup {
namespace testing {

// A healthy pretraining curve: 2 + 6 exp(-step / 400), with 3% noise and,
// every 250 steps, a spike of 1.5x lasting 1 to 8 steps (shorter than the
// loss rules' window), seeded: the negative control of the loss rules.
class HealthyLoss {
 public:
  explicit HealthyLoss(uint32_t seed) : rng_(seed) {}
  // The curve without noise or spikes.
  static double Clean(int64_t step) { return 2.0 + 6.0 * std::exp(-static_cast<double>(step) / 400.0); }
  double At(int64_t step) {
    double loss = Clean(step) * (1.0 + 0.03 * noise_(rng_));
    if (step % 250 == 100) spike_left_ = 1 + static_cast<int>(rng_() % 8);
    if (spike_left_ > 0) {
      --spike_left_;
      loss *= 1.5;
    }
    return loss;
  }

 private:
  std::mt19937 rng_;
  std::normal_distribution<double> noise_{0.0, 1.0};
  int spike_left_ = 0;
};

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_HEALTHY_LOSS_H_
