// Conv gradients in float64 (Note [Float64 kernels] in dnnl_conv_f64.cpp) as GEMMs over im2col matrices:
//   dW_g = sum over images of dY_g [M/G, O] * col_g^T   (col_g [C/G * K, O]: the image's im2col rows of group g)
//   dCol_g = W_g^T [C/G * K, M/G] * dY_g, then col2im adds dCol's rows back into dX.
// The weight gradient reduces along the output positions O, contiguous in both operands, so it runs as blocks of dot
// products held in vector registers (dotTile); the data gradient reuses the forward's GEMM tiles. Direct loops over
// kernel positions (the earlier version) ran at about 1 GFLOP/s: one latency-bound sum per weight.

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_f64.h"
#include "dnnl_context.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

using namespace conv_f64;

namespace {

// C[i, j] += sum over o < length of A[i, o] * B[j, o], for MR rows of A (row stride lda) and NR rows of B (ldb):
// MR x NR vector accumulators, one pass over the rows.
template <int MR, int NR>
void dotTile(const double* a, std::int64_t lda, const double* b, std::int64_t ldb, std::int64_t length, double* c,
             std::int64_t ldc) {
  Double4 acc[MR][NR] = {};
  std::int64_t o = 0;
  for (; o + 4 <= length; o += 4) {
    Double4 bv[NR];
    for (int j = 0; j < NR; ++j)
      bv[j] = load4(b + j * ldb + o);
    for (int i = 0; i < MR; ++i) {
      const Double4 av = load4(a + i * lda + o);
      for (int j = 0; j < NR; ++j)
        acc[i][j] += av * bv[j];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      double sum = (acc[i][j][0] + acc[i][j][1]) + (acc[i][j][2] + acc[i][j][3]);
      for (std::int64_t t = o; t < length; ++t)
        sum += a[i * lda + t] * b[j * ldb + t];
      c[i * ldc + j] += sum;
    }
  }
}

constexpr int kTileRows = 4;  // rows of A (filters) per dotTile
constexpr int kTileCols = 3;  // rows of B (im2col rows) per dotTile: 12 accumulators + 4 operands in 16 registers

// The dotTile for the fringe of a block (fewer rows or columns than the full tile).
template <int MR>
void dotTileCols(int cols, const double* a, std::int64_t lda, const double* b, std::int64_t ldb, std::int64_t length,
                 double* c, std::int64_t ldc) {
  switch (cols) {
    case 3:
      dotTile<MR, 3>(a, lda, b, ldb, length, c, ldc);
      break;
    case 2:
      dotTile<MR, 2>(a, lda, b, ldb, length, c, ldc);
      break;
    default:
      dotTile<MR, 1>(a, lda, b, ldb, length, c, ldc);
      break;
  }
}

void dotTileAny(int rows, int cols, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
                std::int64_t length, double* c, std::int64_t ldc) {
  switch (rows) {
    case 4:
      dotTileCols<4>(cols, a, lda, b, ldb, length, c, ldc);
      break;
    case 3:
      dotTileCols<3>(cols, a, lda, b, ldb, length, c, ldc);
      break;
    case 2:
      dotTileCols<2>(cols, a, lda, b, ldb, length, c, ldc);
      break;
    default:
      dotTileCols<1>(cols, a, lda, b, ldb, length, c, ldc);
      break;
  }
}

constexpr std::int64_t kFilterBlock = 32;   // dW rows per task
constexpr std::int64_t kColumnBlock = 48;   // dW columns (im2col rows) per task
constexpr std::int64_t kOutputBlock = 512;  // output positions per pass: 32 + 48 rows of 4 KiB stay in L2

}  // namespace

void convGradWeightF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                       const double* dy, const double* x, double* dw, double* db) {
  const Window3 g = promoteWindow(geometry, xShape);
  const std::int64_t batch = xShape[0], channels = xShape[1], filters = wShape[0];
  const std::int64_t cPerG = channels / group, mPerG = filters / group;
  const std::int64_t kernelVolume = g.kernelVolume(), inVolume = g.inVolume(), outVolume = g.outVolume();
  const std::int64_t columns = cPerG * kernelVolume;  // dW's row length
  std::fill(dw, dw + filters * columns, 0.0);
  const Im2colChunks chunks = im2colChunks(g, channels, batch);
  const bool pointwise = chunks.pointwise;
  const std::int64_t chunk = chunks.chunk;
  double* col = chunks.col;
  const std::int64_t filterBlocks = (mPerG + kFilterBlock - 1) / kFilterBlock;
  const std::int64_t columnBlocks = (columns + kColumnBlock - 1) / kColumnBlock;
  for (std::int64_t n0 = 0; n0 < batch; n0 += chunk) {
    const std::int64_t images = std::min(chunk, batch - n0);
    if (!pointwise)
      im2colImages(g, x + n0 * channels * inVolume, images, channels, col);
    // Each task owns a block of dW and adds every image of the chunk into it.
    parallelFor(0, group * filterBlocks * columnBlocks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t cb = t % columnBlocks;
        const std::int64_t fb = (t / columnBlocks) % filterBlocks;
        const std::int64_t gi = t / (columnBlocks * filterBlocks);
        const std::int64_t m0 = gi * mPerG + fb * kFilterBlock, m1 = std::min(m0 + kFilterBlock, (gi + 1) * mPerG);
        const std::int64_t r0 = cb * kColumnBlock, r1 = std::min(r0 + kColumnBlock, columns);
        for (std::int64_t ni = 0; ni < images; ++ni) {
          const double* dyImage = dy + (n0 + ni) * filters * outVolume;
          // This image's im2col rows of group gi: [columns, outVolume].
          const double* b = pointwise ? x + ((n0 + ni) * channels + gi * cPerG) * inVolume
                                      : col + (ni * channels + gi * cPerG) * kernelVolume * outVolume;
          for (std::int64_t o0 = 0; o0 < outVolume; o0 += kOutputBlock) {
            const std::int64_t length = std::min(kOutputBlock, outVolume - o0);
            for (std::int64_t m = m0; m < m1; m += kTileRows) {
              const int rows = static_cast<int>(std::min<std::int64_t>(kTileRows, m1 - m));
              for (std::int64_t r = r0; r < r1; r += kTileCols) {
                const int cols = static_cast<int>(std::min<std::int64_t>(kTileCols, r1 - r));
                const double* aRows = dyImage + m * outVolume + o0;
                const double* bRows = b + r * outVolume + o0;
                double* c = dw + m * columns + r;
                if (rows == kTileRows && cols == kTileCols)
                  dotTile<kTileRows, kTileCols>(aRows, outVolume, bRows, outVolume, length, c, columns);
                else
                  dotTileAny(rows, cols, aRows, outVolume, bRows, outVolume, length, c, columns);
              }
            }
          }
        }
      }
    });
  }
  if (db == nullptr)
    return;
  parallelFor(0, filters, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t m = begin; m < end; ++m) {
      double sum = 0;
      for (std::int64_t n = 0; n < batch; ++n) {
        const double* grad = dy + (n * filters + m) * outVolume;
        for (std::int64_t i = 0; i < outVolume; ++i)
          sum += grad[i];
      }
      db[m] = sum;
    }
  });
}

void convGradInputF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                      const double* dy, const double* w, double* dx) {
  const Window3 g = promoteWindow(geometry, xShape);
  const std::int64_t batch = xShape[0], channels = xShape[1], filters = wShape[0];
  const std::int64_t cPerG = channels / group, mPerG = filters / group;
  const std::int64_t kernelVolume = g.kernelVolume(), inVolume = g.inVolume(), outVolume = g.outVolume();
  const std::int64_t columns = cPerG * kernelVolume;
  const bool pointwise = isPointwise(g);  // then dCol is dX itself
  const std::int64_t colPerImage = pointwise ? 0 : channels * kernelVolume * outVolume;
  const std::int64_t chunk = pointwise ? batch : imagesPerChunk(colPerImage, batch);
  // Scratch: W transposed per group ([G][columns, M/G]), then the chunk's dCol.
  const std::int64_t wDoubles = filters * columns;
  auto* scratch =
      static_cast<double*>(dnnlScratchpad(static_cast<std::size_t>(wDoubles + chunk * colPerImage) * sizeof(double)));
  double* wT = scratch;
  double* dcol = scratch + wDoubles;
  parallelFor(0, group * columns, 64, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t t = begin; t < end; ++t) {
      const std::int64_t gi = t / columns, r = t % columns;
      double* out = wT + (gi * columns + r) * mPerG;
      for (std::int64_t m = 0; m < mPerG; ++m)
        out[m] = w[(gi * mPerG + m) * columns + r];
    }
  });
  const std::int64_t rowBlocks = (columns + kRowBlock - 1) / kRowBlock;
  const std::int64_t colBlocks = (outVolume + kColBlock - 1) / kColBlock;
  for (std::int64_t n0 = 0; n0 < batch; n0 += chunk) {
    const std::int64_t images = std::min(chunk, batch - n0);
    parallelFor(0, images * group * rowBlocks * colBlocks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t cb = t % colBlocks;
        const std::int64_t rb = (t / colBlocks) % rowBlocks;
        const std::int64_t gi = (t / (colBlocks * rowBlocks)) % group;
        const std::int64_t ni = t / (colBlocks * rowBlocks * group);
        const std::int64_t r0 = rb * kRowBlock, rows = std::min(kRowBlock, columns - r0);
        const std::int64_t j0 = cb * kColBlock, cols = std::min(kColBlock, outVolume - j0);
        double* c = pointwise ? dx + ((n0 + ni) * channels + gi * cPerG) * inVolume
                              : dcol + (ni * channels + gi * cPerG) * kernelVolume * outVolume;
        gemmTile(rows, cols, mPerG, wT + (gi * columns + r0) * mPerG, mPerG,
                 dy + ((n0 + ni) * filters + gi * mPerG) * outVolume + j0, outVolume, c + r0 * outVolume + j0,
                 outVolume, nullptr);
      }
    });
    if (pointwise)
      continue;
    // col2im: each task owns one plane of dX and adds its kernel positions' dCol rows into it.
    parallelFor(0, images * channels, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t plane = begin; plane < end; ++plane) {
        double* out = dx + (n0 * channels + plane) * inVolume;
        std::fill(out, out + inVolume, 0.0);
        for (std::int64_t kd = 0; kd < g.kernel[0]; ++kd) {
          std::int64_t d0, d1;
          validOutputRange(g.in[0], g.out[0], g.stride[0], g.pad[0], kd * g.dilation[0], d0, d1);
          for (std::int64_t kh = 0; kh < g.kernel[1]; ++kh) {
            std::int64_t h0, h1;
            validOutputRange(g.in[1], g.out[1], g.stride[1], g.pad[1], kh * g.dilation[1], h0, h1);
            for (std::int64_t kw = 0; kw < g.kernel[2]; ++kw) {
              std::int64_t w0, w1;
              validOutputRange(g.in[2], g.out[2], g.stride[2], g.pad[2], kw * g.dilation[2], w0, w1);
              const double* row =
                  dcol + (plane * kernelVolume + (kd * g.kernel[1] + kh) * g.kernel[2] + kw) * outVolume;
              for (std::int64_t od = d0; od < d1; ++od) {
                const std::int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dilation[0];
                for (std::int64_t oh = h0; oh < h1; ++oh) {
                  const std::int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dilation[1];
                  const double* gRow = row + (od * g.out[1] + oh) * g.out[2];
                  double* xRow = out + (id * g.in[1] + ih) * g.in[2] - g.pad[2] + kw * g.dilation[2];
                  for (std::int64_t ow = w0; ow < w1; ++ow)
                    xRow[ow * g.stride[2]] += gRow[ow];
                }
              }
            }
          }
        }
      }
    });
  }
}

}  // namespace strata::cpu
