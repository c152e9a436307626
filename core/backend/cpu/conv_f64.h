#pragma once

// Float64 convolution loops (Note [Float64 kernels] in dnnl_conv_f64.cpp): the im2col and GEMM pieces shared by the
// forward pass (dnnl_conv_f64.cpp) and the gradients (conv_f64_grad.cpp).
#include <cstdint>
#include <cstring>

#include "window3.h"

namespace strata::cpu {

// The gradients of convForwardF64 (same shapes and layouts); dB (db, [M]) only when db is not null. Both use the
// calling thread's dnnlScratchpad.
void convGradInputF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                      const double* dy, const double* w, double* dx);
void convGradWeightF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                       const double* dy, const double* x, double* dw, double* db);

namespace conv_f64 {

// Four doubles in one AVX2 register (GCC vector extension; the kernels build for x86-64-v3).
using Double4 = double __attribute__((vector_size(32)));

inline Double4 load4(const double* p) {
  Double4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store4(double* p, Double4 v) {
  std::memcpy(p, &v, sizeof v);
}

constexpr std::int64_t kRowBlock = 32;     // output channels per GEMM task
constexpr std::int64_t kColBlock = 256;    // output positions per GEMM task (one C row chunk: 2 KiB, stays in L1)
constexpr std::int64_t kDepthBlock = 128;  // reduction block: a 128 x 256 panel of B (256 KiB) stays in L2

// One im2col row: the input plane `plane` sampled at kernel position (kd, kh, kw) for every output position.
void im2colRow(const Window3& g, const double* plane, std::int64_t kd, std::int64_t kh, std::int64_t kw, double* row);
// im2col of `images` images of `channels` planes each (x points at the first): rows (image, channel, kernel position),
// each g.outVolume() long. Parallel over rows.
void im2colImages(const Window3& g, const double* x, std::int64_t images, std::int64_t channels, double* col);
// A 1x1 window with stride 1 and no padding: X's planes are the im2col rows.
bool isPointwise(const Window3& g);
// Images per im2col chunk: about 32 MiB of doubles, at least one image.
std::int64_t imagesPerChunk(std::int64_t doublesPerImage, std::int64_t batch);
// The im2col matrices of a pass over the batch: `chunk` images at a time in `col` (the calling thread's
// dnnlScratchpad), or none when the window is pointwise (X's planes are the rows; chunk is the whole batch).
struct Im2colChunks {
  bool pointwise = false;
  std::int64_t chunk = 0;
  double* col = nullptr;
};
Im2colChunks im2colChunks(const Window3& g, std::int64_t channels, std::int64_t batch);
// C[rows, cols] = bias (per row, or 0) + A[rows, depth] * B[depth, cols]; leading dimensions lda, ldb, ldc.
void gemmTile(std::int64_t rows, std::int64_t cols, std::int64_t depth, const double* a, std::int64_t lda,
              const double* b, std::int64_t ldb, double* c, std::int64_t ldc, const double* bias);

}  // namespace conv_f64
}  // namespace strata::cpu
