#ifndef TRAINSUP_DAEMON_CORE_RANK_TABLE_H_
#define TRAINSUP_DAEMON_CORE_RANK_TABLE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace trainsup {

// The states of the ranks heard of, by rank. Memory follows the ranks that
// report, never a claimed world size; finding a rank (every heartbeat) is a
// hash probe and an array index; iteration is in rank order (the detectors
// break ties by the lowest rank, and `ranks` lists ranks in order).
//
// Ranks are grouped in pages of 256 consecutive ranks. A page holds the slot
// of each of its ranks that was heard of; the pages are kept sorted by
// number (a job has at most a few hundred) and found through a hash map.
// The states live in a deque in arrival order, so a reference to one stays
// valid while others are added (until clear()).
template <typename T>
class RankTable {
 public:
  using Entry = std::pair<const uint32_t, T>;

 private:
  static constexpr uint32_t kPageBits = 8;
  static constexpr uint32_t kPageSize = 1u << kPageBits;
  static constexpr uint32_t kNoSlot = UINT32_MAX;
  struct Page {
    uint32_t number = 0;
    std::array<uint32_t, kPageSize> slots;
    Page() { slots.fill(kNoSlot); }
  };

 public:
  // Walks the ranks in order: the pages in order, each page's slots in order.
  template <typename EntryT, typename TableT>
  class Iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Entry;
    using difference_type = std::ptrdiff_t;
    using pointer = EntryT*;
    using reference = EntryT&;

    Iterator(TableT* table, size_t page, uint32_t offset)
        : table_(table), page_(page), offset_(offset) {
      SkipEmpty();
    }
    reference operator*() const {
      return table_->slots_[table_->pages_[page_]->slots[offset_]];
    }
    pointer operator->() const { return &**this; }
    Iterator& operator++() {
      ++offset_;
      SkipEmpty();
      return *this;
    }
    bool operator==(const Iterator& o) const { return page_ == o.page_ && offset_ == o.offset_; }
    bool operator!=(const Iterator& o) const { return !(*this == o); }

   private:
    // Moves to the next slot in use at or after the current one, or to end.
    void SkipEmpty() {
      while (page_ < table_->pages_.size()) {
        const auto& slots = table_->pages_[page_]->slots;
        while (offset_ < kPageSize && slots[offset_] == kNoSlot) ++offset_;
        if (offset_ < kPageSize) return;
        ++page_;
        offset_ = 0;
      }
      offset_ = 0;
    }

    TableT* table_;
    size_t page_;
    uint32_t offset_;
  };
  using iterator = Iterator<Entry, RankTable>;
  using const_iterator = Iterator<const Entry, const RankTable>;

  bool empty() const { return slots_.empty(); }
  size_t size() const { return slots_.size(); }
  iterator begin() { return iterator(this, 0, 0); }
  iterator end() { return iterator(this, pages_.size(), 0); }
  const_iterator begin() const { return const_iterator(this, 0, 0); }
  const_iterator end() const { return const_iterator(this, pages_.size(), 0); }

  // The state of `rank`; nullptr when it was not heard of.
  T* Find(uint32_t rank) {
    const uint32_t slot = SlotOf(rank);
    return slot == kNoSlot ? nullptr : &slots_[slot].second;
  }
  const T* Find(uint32_t rank) const {
    const uint32_t slot = SlotOf(rank);
    return slot == kNoSlot ? nullptr : &slots_[slot].second;
  }

  // The state of `rank`, made from `args` if it was not heard of.
  template <typename... Args>
  T& FindOrAdd(uint32_t rank, Args&&... args) {
    Page& page = PageFor(rank);
    uint32_t& slot = page.slots[rank & (kPageSize - 1)];
    if (slot == kNoSlot) {
      slot = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back(std::piecewise_construct, std::forward_as_tuple(rank),
                          std::forward_as_tuple(std::forward<Args>(args)...));
    }
    return slots_[slot].second;
  }

  void clear() {
    slots_.clear();
    pages_.clear();
    page_index_.clear();
  }

 private:
  uint32_t SlotOf(uint32_t rank) const {
    auto it = page_index_.find(rank >> kPageBits);
    return it == page_index_.end() ? kNoSlot : it->second->slots[rank & (kPageSize - 1)];
  }

  Page& PageFor(uint32_t rank) {
    const uint32_t number = rank >> kPageBits;
    auto it = page_index_.find(number);
    if (it != page_index_.end()) return *it->second;
    auto page = std::make_unique<Page>();
    page->number = number;
    Page* raw = page.get();
    auto at = std::lower_bound(pages_.begin(), pages_.end(), number,
                               [](const std::unique_ptr<Page>& p, uint32_t n) { return p->number < n; });
    pages_.insert(at, std::move(page));
    page_index_[number] = raw;
    return *raw;
  }

  std::deque<Entry> slots_;                           // states, in arrival order
  std::vector<std::unique_ptr<Page>> pages_;          // by page number, ascending
  absl::flat_hash_map<uint32_t, Page*> page_index_;  // page number -> page
};

}  // namespace trainsup

#endif  // TRAINSUP_DAEMON_CORE_RANK_TABLE_H_
