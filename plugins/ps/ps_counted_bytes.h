#pragma once

// Note [PS server memory]: a parameter server's memory figures come from Strata's allocator, as the workers' do.
// Its parameters (its key ranges), gradient sums and optimizer state are tensors, so they are counted where they
// are allocated. ZeroMQ allocates the messages it receives itself (malloc), so a server counts each request's bytes
// under Communication from the moment it takes the message off its socket until it has applied it (CountedBytes),
// and makes the copies it answers with (async and ssp; optimizer state) as Communication tensors that live until
// ZeroMQ has sent them (countedCopy). Messages still queued inside ZeroMQ, and its socket buffers, show in the
// process's resident memory only.

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include <zmq.hpp>

#include "strata/allocator.h"
#include "strata/tensor.h"

namespace strata::ps {

// Counts `bytes` that are not a tensor (a received ZeroMQ message) in the CPU allocator's stats for as long as it
// lives.
class CountedBytes {
 public:
  CountedBytes() = default;
  CountedBytes(MemoryCategory category, std::size_t bytes) : category_(category), bytes_(bytes) {
    allocatorFor(Device::cpu()).stats().onAllocate(category_, bytes_);
  }
  ~CountedBytes() { release(); }
  CountedBytes(CountedBytes&& other) noexcept : category_(other.category_), bytes_(std::exchange(other.bytes_, 0)) {}
  CountedBytes& operator=(CountedBytes&& other) noexcept {
    if (this != &other) {
      release();
      category_ = other.category_;
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  CountedBytes(const CountedBytes&) = delete;
  CountedBytes& operator=(const CountedBytes&) = delete;

  std::size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (bytes_ > 0) {
      allocatorFor(Device::cpu()).stats().onFree(category_, bytes_);
      bytes_ = 0;
    }
  }

  MemoryCategory category_ = MemoryCategory::Communication;
  std::size_t bytes_ = 0;
};

// The bytes of every frame of a message.
inline std::size_t messageBytes(const std::vector<zmq::message_t>& frames) {
  std::size_t bytes = 0;
  for (const zmq::message_t& frame : frames) {
    bytes += frame.size();
  }
  return bytes;
}

// A ZeroMQ message holding a copy of `bytes` at `data` in a Communication tensor, freed when ZeroMQ is done with it
// (its free function runs on ZeroMQ's I/O thread; the allocator is thread-safe).
inline zmq::message_t countedCopy(const void* data, std::size_t bytes) {
  auto* copy =
      new Tensor(Tensor::empty(DType::UInt8, {static_cast<std::int64_t>(bytes)}, MemoryCategory::Communication));
  if (bytes > 0) {
    std::memcpy(copy->rawData(), data, bytes);
  }
  return zmq::message_t(
      copy->rawData(), bytes, [](void* /*data*/, void* hint) { delete static_cast<Tensor*>(hint); }, copy);
}

}  // namespace strata::ps
