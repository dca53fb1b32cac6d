#ifndef TRAINSUP_TESTS_SUPPORT_WAIT_H_
#define TRAINSUP_TESTS_SUPPORT_WAIT_H_

#include <chrono>
#include <thread>

namespace trainsup {
namespace testing {

// Polls `condition` until it holds or `timeout` passes; returns its last
// value. For waiting on another thread or process with a deadline, never a
// bare sleep: the poll period only bounds how late the test notices.
template <typename Condition>
bool WaitFor(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return condition();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace testing
}  // namespace trainsup

#endif  // TRAINSUP_TESTS_SUPPORT_WAIT_H_
