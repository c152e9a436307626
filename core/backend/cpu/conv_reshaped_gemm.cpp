#include "conv_reshaped_gemm.h"

#include "conv_batch_columns.h"
#include "conv_whole_map.h"

namespace strata::cpu {

std::unique_ptr<ReshapedGemmConv> planReshapedGemmConv(const Shape& x, const Shape& w, std::int64_t group,
                                                       const WindowGeometry& geometry, bool bias, bool channelsLast) {
  if (std::unique_ptr<ReshapedGemmConv> wholeMap = WholeMapConv::plan(x, w, group, geometry, bias, channelsLast))
    return wholeMap;
  return BatchColumnsConv::plan(x, w, group, geometry, bias, channelsLast);
}

}  // namespace strata::cpu
