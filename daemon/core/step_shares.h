#ifndef TRAINSUP_DAEMON_CORE_STEP_SHARES_H_
#define TRAINSUP_DAEMON_CORE_STEP_SHARES_H_

#include <optional>

namespace trainsup {

// Where one rank's recent step time went: the share spent waiting for data,
// and the share outside both its own work (hb.compute()) and the data wait,
// which in a synchronous job is the collective (communication, and waiting
// for slower peers). Kept as exponentially decayed sums over the rank's
// steps, weighted by step time, so that one share is "of each second of
// step time", in O(1) memory and time per step:
//   recent: decay kRecentDecay per step (a half-life of about 7 steps): the
//           data-wait share, and the communication share's trend;
//   long:   decay kLongDecay per step (about 70 steps): the communication
//           share, a steady state that a scheduling hiccup does not move.
// Thread-compatible.
class StepShares {
 public:
  static constexpr float kRecentDecay = 0.9f;
  static constexpr float kLongDecay = 0.99f;

  // One completed step: its wall time, the part of it waiting for input,
  // and its compute time when the rank measures it. A step of no measured
  // duration (<= 0) is ignored.
  void Add(double step_s, double data_wait_s, std::optional<double> compute_s);

  // Whether any step was added.
  bool empty() const { return step_ <= 0; }
  // Recent share of step time waiting for data, in [0, 1]; 0 when empty.
  double data_wait_share() const;
  // Share of step time outside compute and data wait over the long decay
  // (a steady state, that a few slow steps do not move), in [0, 1];
  // nullopt when no step carried a compute time.
  std::optional<double> comm_share() const;
  // The recent communication share minus the long one: > 0 rising.
  // nullopt as comm_share().
  std::optional<double> comm_share_trend() const;

 private:
  // Decayed sums, seconds: every step's time; its data wait; and of the
  // steps with a compute time, their time and what was outside compute and
  // data wait (recent and long).
  float step_ = 0;
  float wait_ = 0;
  float comm_step_ = 0;
  float comm_ = 0;
  float long_comm_step_ = 0;
  float long_comm_ = 0;
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_STEP_SHARES_H_
