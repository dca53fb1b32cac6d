#include "daemon/journal_writer.h"

#include <utility>

namespace trainsup {

JournalWriter::JournalWriter(JournalSink* sink) : sink_(sink) {
  thread_ = std::thread([this] { Loop(); });
}

JournalWriter::~JournalWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void JournalWriter::Write(Journal journal, JournalSink::Sync sync, Then then) {
  absl::MutexLock lock(&mu_);
  queue_.push_back({std::move(journal), sync, std::move(then)});
  ++written_;
}

void JournalWriter::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = written_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= target; };
  mu_.Await(absl::Condition(&done));
}

size_t JournalWriter::pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<size_t>(written_ - done_);
}

void JournalWriter::Loop() {
  for (;;) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      // Stopping drains the queue first: what was decided is not dropped.
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    const absl::Status committed =
        item.journal.empty() ? absl::OkStatus() : sink_->Apply(item.journal, item.sync);
    if (item.then) item.then(committed);
    absl::MutexLock lock(&mu_);
    ++done_;
  }
}

}  // namespace trainsup
