#include "cpu_ops.h"
#include "dnnl_context.h"

namespace strata::cpu {

// Conv, pooling, normalisation and matrix products, on oneDNN primitives built once per node (see dnnl_*.cpp).
void registerDnnlOps(OpRegistry& registry) {
  registerDnnlConvOps(registry);
  registerDnnlPoolOps(registry);
  registerNormOps(registry);
  registerDnnlMatmulOps(registry);
}

}  // namespace strata::cpu
