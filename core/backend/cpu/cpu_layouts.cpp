#include "cpu_layouts.h"

#include <algorithm>

namespace strata::cpu {

std::vector<std::int64_t> stridesWithInnermost(const std::vector<std::int64_t>& dims, int innermost) {
  std::vector<std::size_t> order;  // physical order, outermost first
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int>(d) != innermost)
      order.push_back(d);
  }
  if (innermost >= 0 && static_cast<std::size_t>(innermost) < dims.size())
    order.push_back(static_cast<std::size_t>(innermost));
  std::vector<std::int64_t> strides(dims.size(), 1);
  std::int64_t stride = 1;
  for (std::size_t i = order.size(); i-- > 0;) {
    strides[order[i]] = stride;
    stride *= std::max<std::int64_t>(dims[order[i]], 1);
  }
  return strides;
}

dnnl::memory::desc descWithInnermost(const std::vector<std::int64_t>& dims, int innermost,
                                     dnnl::memory::data_type type) {
  const std::vector<std::int64_t> strides = stridesWithInnermost(dims, innermost);
  return dnnl::memory::desc(dnnl::memory::dims(dims.begin(), dims.end()), type,
                            dnnl::memory::dims(strides.begin(), strides.end()));
}

}  // namespace strata::cpu
