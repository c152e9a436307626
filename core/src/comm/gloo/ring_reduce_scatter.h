#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace gloo {
class Context;
}

namespace strata::detail {

// A ring reduce-scatter over Gloo's unbound buffers: `input` holds context.size equal parts of `part` elements; the
// sum over all ranks of part context.rank lands in `output`. Each rank sends and receives (size - 1) parts, the
// bandwidth-optimal amount, instead of the 2 (size - 1) parts of an all-reduce followed by a slice.
//
// Note [ring reduce-scatter]: step s (0 <= s < size - 1) sends the partial sum of part (rank - s - 1) to the right
// neighbour and adds the local part (rank - s - 2) to what arrives from the left, so after size - 1 steps the part
// that arrives last, part rank, holds every rank's contribution. Gloo's packaged ReduceScatterHalvingDoubling was
// not used: it reduces in place (the input would be lost), counts elements in int (bytes overflow past 2 GiB),
// and uses the older bound-buffer API, which takes neither the collective's tag nor a per-call timeout.
// The input is read only; output may be the input's part rank (in place). Throws on timeout or a transport error.
template <typename T>
void ringReduceScatter(const std::shared_ptr<gloo::Context>& context, const T* input, T* output, std::size_t part,
                       std::uint32_t tag, std::chrono::milliseconds timeout);

}  // namespace strata::detail
