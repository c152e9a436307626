#include "ring_reduce_scatter.h"

#include <algorithm>
#include <cstring>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "element_sum.h"
#include "strata/error.h"
#include "strata/tensor.h"

namespace strata::detail {

namespace {

// Gloo's own collectives use slot prefixes 0x01-0x08 (gloo/types.h); a distinct prefix keeps ours apart even when
// they share a tag.
constexpr std::uint8_t kReduceScatterSlotPrefix = 0x40;

using Clock = std::chrono::steady_clock;

template <typename T>
DType scratchType() {
  if constexpr (std::is_same_v<T, Half>) {
    return DType::Float16;
  } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
    return DType::BFloat16;
  } else {
    return dtypeOf<T>();
  }
}

void waitFor(gloo::transport::UnboundBuffer& buffer, bool receiving, Clock::time_point deadline, int peer) {
  const auto left = std::max(std::chrono::milliseconds(1),
                             std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  // Gloo's TCP transport throws on a timeout or a broken pair; false means the wait was aborted.
  const bool done = receiving ? buffer.waitRecv(left) : buffer.waitSend(left);
  STRATA_CHECK(done, "reduce-scatter: the {} rank {} was aborted", receiving ? "receive from" : "send to", peer);
}

}  // namespace

template <typename T>
void ringReduceScatter(const std::shared_ptr<gloo::Context>& context, const T* input, T* output, std::size_t part,
                       std::uint32_t tag, std::chrono::milliseconds timeout) {
  const int size = context->size;
  const int rank = context->rank;
  const std::size_t partBytes = part * sizeof(T);
  if (size == 1 || part == 0) {
    if (output != input) {
      std::memmove(output, input, partBytes);
    }
    return;
  }
  const auto deadline = Clock::now() + timeout;
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const auto slot = gloo::Slot::build(kReduceScatterSlotPrefix, tag);
  const auto partIndex = [size](int k) { return static_cast<std::size_t>(((k % size) + size) % size); };

  // Partial sums arrive in `incoming` and leave from `outgoing`: two parts of scratch, whatever the group size.
  Tensor scratch =
      Tensor::empty(scratchType<T>(), {static_cast<std::int64_t>(2 * part)}, MemoryCategory::Communication);
  T* incoming = scratch.data<T>();
  T* outgoing = incoming + part;
  // The input is only ever sent from (Gloo's buffers take non-const pointers).
  auto inputBuffer = context->createUnboundBuffer(const_cast<T*>(input), partBytes * static_cast<std::size_t>(size));
  auto incomingBuffer = context->createUnboundBuffer(incoming, partBytes);
  auto outgoingBuffer = context->createUnboundBuffer(outgoing, partBytes);

  for (int step = 0; step < size - 1; ++step) {
    // Step 0 sends the local part straight from the input; later steps the partial sum built in the step before.
    gloo::transport::UnboundBuffer& sending = step == 0 ? *inputBuffer : *outgoingBuffer;
    const std::size_t sendOffset = step == 0 ? partIndex(rank - 1) * partBytes : 0;
    sending.send(right, slot, sendOffset, partBytes);
    incomingBuffer->recv(left, slot, 0, partBytes);
    waitFor(*incomingBuffer, true, deadline, left);
    // `outgoing` is rewritten below: its send must have left first.
    waitFor(sending, false, deadline, right);
    const T* local = input + partIndex(rank - step - 2) * part;
    T* sum = step == size - 2 ? output : outgoing;  // the last part to arrive is part rank: the result
    addElements(sum, incoming, local, part);
  }
}

template void ringReduceScatter<float>(const std::shared_ptr<gloo::Context>&, const float*, float*, std::size_t,
                                       std::uint32_t, std::chrono::milliseconds);
template void ringReduceScatter<double>(const std::shared_ptr<gloo::Context>&, const double*, double*, std::size_t,
                                        std::uint32_t, std::chrono::milliseconds);

template void ringReduceScatter<Half>(const std::shared_ptr<gloo::Context>&, const Half*, Half*, std::size_t,
                                      std::uint32_t, std::chrono::milliseconds);
template void ringReduceScatter<BFloat16Bits>(const std::shared_ptr<gloo::Context>&, const BFloat16Bits*, BFloat16Bits*,
                                              std::size_t, std::uint32_t, std::chrono::milliseconds);

}  // namespace strata::detail
