// A FIFO queue in one growable circular buffer: push_back and pop_front
// allocate nothing once the buffer has grown to the longest queue seen. Its
// capacity is a power of two, so a slot's index is a mask, not a division
// (three of them for every non-blocking call).
// std::deque allocates a node for every few elements and frees it on
// whichever thread pops, which made each non-blocking call pay a malloc on
// the issuing thread and a cross-thread free on the executing one.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace loom {

template <class T>
class RingQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }  // elements held before it grows
  T& front() { return slots_[head_]; }
  T& at(size_t i) { return slots_[Slot(i)]; }  // i < size()

  void push_back(T&& v) {
    if (size_ == slots_.size()) Grow();
    slots_[Slot(size_)] = std::move(v);
    ++size_;
  }

  // The front element is moved-from and left in place (its storage is
  // reused by a later push_back, which assigns over it).
  void pop_front() {
    slots_[head_] = T();
    head_ = Slot(1);
    --size_;
  }

  // Room for at least `n` elements without growing (the next power of two),
  // every slot constructed now: a queue sized at setup never first-touches
  // fresh pages in a timed loop (under a hypervisor each costs microseconds).
  void Reserve(size_t n) {
    if (n <= slots_.size()) return;
    size_t capacity = 16;
    while (capacity < n) capacity *= 2;
    Resize(capacity);
  }

  template <class F>
  void ForEach(F&& f) {
    for (size_t i = 0; i < size_; ++i) f(slots_[Slot(i)]);
  }

 private:
  size_t Slot(size_t i) const { return (head_ + i) & (slots_.size() - 1); }
  void Grow() { Resize(slots_.empty() ? 16 : 2 * slots_.size()); }

  void Resize(size_t capacity) {
    std::vector<T> bigger(capacity);
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move(slots_[Slot(i)]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace loom
