// Conv in float64, which oneDNN does not have: im2col + a cache-blocked GEMM in plain C++ loops.
// Note [Float64 kernels]: float64 exists for reference checks (whole models compared with PyTorch in float64, where
// float32 runs are too chaotic to compare), so these loops aim at "fast enough for a ResNet50 at small resolution",
// not at oneDNN speed. Summation happens in double throughout. The gradients (conv_f64_grad.cpp) reuse the im2col
// and GEMM tiles here.

#include <algorithm>
#include <cstring>

#include "conv_f64.h"
#include "dnnl_context.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace conv_f64 {

void im2colRow(const Window3& g, const double* plane, std::int64_t kd, std::int64_t kh, std::int64_t kw, double* row) {
  const std::int64_t outHW = g.out[1] * g.out[2];
  const std::int64_t offD = kd * g.dilation[0], offH = kh * g.dilation[1], offW = kw * g.dilation[2];
  std::int64_t d0, d1, h0, h1, w0, w1;
  validOutputRange(g.in[0], g.out[0], g.stride[0], g.pad[0], offD, d0, d1);
  validOutputRange(g.in[1], g.out[1], g.stride[1], g.pad[1], offH, h0, h1);
  validOutputRange(g.in[2], g.out[2], g.stride[2], g.pad[2], offW, w0, w1);
  const std::int64_t sw = g.stride[2];
  for (std::int64_t od = 0; od < g.out[0]; ++od) {
    double* dRow = row + od * outHW;
    if (od < d0 || od >= d1) {
      std::fill(dRow, dRow + outHW, 0.0);
      continue;
    }
    const std::int64_t id = od * g.stride[0] - g.pad[0] + offD;
    for (std::int64_t oh = 0; oh < g.out[1]; ++oh) {
      double* out = dRow + oh * g.out[2];
      if (oh < h0 || oh >= h1) {
        std::fill(out, out + g.out[2], 0.0);
        continue;
      }
      const std::int64_t ih = oh * g.stride[1] - g.pad[1] + offH;
      const double* src = plane + (id * g.in[1] + ih) * g.in[2] - g.pad[2] + offW;
      std::fill(out, out + w0, 0.0);
      if (sw == 1) {
        std::memcpy(out + w0, src + w0, static_cast<std::size_t>(w1 - w0) * sizeof(double));
      } else {
        for (std::int64_t ow = w0; ow < w1; ++ow)
          out[ow] = src[ow * sw];
      }
      std::fill(out + w1, out + g.out[2], 0.0);
    }
  }
}

void im2colImages(const Window3& g, const double* x, std::int64_t images, std::int64_t channels, double* col) {
  const std::int64_t kernelVolume = g.kernelVolume(), inVolume = g.inVolume(), outVolume = g.outVolume();
  const std::int64_t rows = images * channels * kernelVolume;
  parallelFor(0, rows, std::max<std::int64_t>(1, 1024 / outVolume), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t kernelIndex = r % kernelVolume;
      const std::int64_t plane = r / kernelVolume;  // (image, channel)
      const std::int64_t kw = kernelIndex % g.kernel[2];
      const std::int64_t kh = (kernelIndex / g.kernel[2]) % g.kernel[1];
      const std::int64_t kd = kernelIndex / (g.kernel[2] * g.kernel[1]);
      im2colRow(g, x + plane * inVolume, kd, kh, kw, col + r * outVolume);
    }
  });
}

bool isPointwise(const Window3& g) {
  bool pointwise = true;
  for (int i = 0; i < 3; ++i)
    pointwise = pointwise && g.kernel[i] == 1 && g.stride[i] == 1 && g.pad[i] == 0 && g.out[i] == g.in[i];
  return pointwise;
}

std::int64_t imagesPerChunk(std::int64_t doublesPerImage, std::int64_t batch) {
  return std::clamp<std::int64_t>((std::int64_t{4} << 20) / std::max<std::int64_t>(doublesPerImage, 1), 1, batch);
}

Im2colChunks im2colChunks(const Window3& g, std::int64_t channels, std::int64_t batch) {
  Im2colChunks chunks;
  chunks.pointwise = isPointwise(g);
  if (chunks.pointwise) {
    chunks.chunk = batch;
    return chunks;
  }
  const std::int64_t perImage = channels * g.kernelVolume() * g.outVolume();
  chunks.chunk = imagesPerChunk(perImage, batch);
  chunks.col = static_cast<double*>(dnnlScratchpad(static_cast<std::size_t>(chunks.chunk * perImage) * sizeof(double)));
  return chunks;
}

namespace {

// C[MR, cols] += A[MR, k0:k1] * B[k0:k1, cols]: MR rows by 8 columns of C held in vector registers over the whole
// reduction block, so each B load serves MR multiply-adds and C is loaded and stored once per block.
template <int MR>
void gemmRows(std::int64_t cols, std::int64_t k0, std::int64_t k1, const double* a, std::int64_t lda, const double* b,
              std::int64_t ldb, double* c, std::int64_t ldc) {
  std::int64_t j = 0;
  for (; j + 8 <= cols; j += 8) {
    Double4 acc[MR][2];
    for (int i = 0; i < MR; ++i) {
      acc[i][0] = load4(c + i * ldc + j);
      acc[i][1] = load4(c + i * ldc + j + 4);
    }
    for (std::int64_t k = k0; k < k1; ++k) {
      const Double4 b0 = load4(b + k * ldb + j), b1 = load4(b + k * ldb + j + 4);
      for (int i = 0; i < MR; ++i) {
        const Double4 av = Double4{} + a[i * lda + k];
        acc[i][0] += av * b0;
        acc[i][1] += av * b1;
      }
    }
    for (int i = 0; i < MR; ++i) {
      store4(c + i * ldc + j, acc[i][0]);
      store4(c + i * ldc + j + 4, acc[i][1]);
    }
  }
  for (; j < cols; ++j) {
    for (int i = 0; i < MR; ++i) {
      double sum = c[i * ldc + j];
      for (std::int64_t k = k0; k < k1; ++k)
        sum += a[i * lda + k] * b[k * ldb + j];
      c[i * ldc + j] = sum;
    }
  }
}

}  // namespace

void gemmTile(std::int64_t rows, std::int64_t cols, std::int64_t depth, const double* a, std::int64_t lda,
              const double* b, std::int64_t ldb, double* c, std::int64_t ldc, const double* bias) {
  for (std::int64_t i = 0; i < rows; ++i)
    std::fill(c + i * ldc, c + i * ldc + cols, bias != nullptr ? bias[i] : 0.0);
  for (std::int64_t k0 = 0; k0 < depth; k0 += kDepthBlock) {
    const std::int64_t k1 = std::min(depth, k0 + kDepthBlock);
    std::int64_t i = 0;
    for (; i + 4 <= rows; i += 4)
      gemmRows<4>(cols, k0, k1, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
    switch (rows - i) {
      case 3:
        gemmRows<3>(cols, k0, k1, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
        break;
      case 2:
        gemmRows<2>(cols, k0, k1, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
        break;
      case 1:
        gemmRows<1>(cols, k0, k1, a + i * lda, lda, b, ldb, c + i * ldc, ldc);
        break;
      default:
        break;
    }
  }
}

}  // namespace conv_f64

using namespace conv_f64;

void convForwardF64(const WindowGeometry& geometry, const Shape& xShape, const Shape& wShape, std::int64_t group,
                    const double* x, const double* w, const double* bias, double* y) {
  const Window3 g = promoteWindow(geometry, xShape);
  const std::int64_t batch = xShape[0];
  const std::int64_t channels = xShape[1];
  const std::int64_t filters = wShape[0];
  const std::int64_t cPerG = channels / group;
  const std::int64_t mPerG = filters / group;
  const std::int64_t kernelVolume = g.kernel[0] * g.kernel[1] * g.kernel[2];
  const std::int64_t inVolume = g.in[0] * g.in[1] * g.in[2];
  const std::int64_t outVolume = g.out[0] * g.out[1] * g.out[2];
  const std::int64_t depth = cPerG * kernelVolume;  // GEMM reduction length: W's row length
  if (batch == 0 || filters == 0 || outVolume == 0)
    return;
  // im2col for a chunk of images at a time, in the shared scratchpad, at most ~32 MiB unless one image needs more.
  const Im2colChunks chunks = im2colChunks(g, channels, batch);
  const bool pointwise = chunks.pointwise;
  const std::int64_t chunk = chunks.chunk;
  double* col = chunks.col;
  const std::int64_t rowBlocks = (mPerG + kRowBlock - 1) / kRowBlock;
  const std::int64_t colBlocks = (outVolume + kColBlock - 1) / kColBlock;
  for (std::int64_t n0 = 0; n0 < batch; n0 += chunk) {
    const std::int64_t images = std::min(chunk, batch - n0);
    if (!pointwise)
      im2colImages(g, x + n0 * channels * inVolume, images, channels, col);
    const std::int64_t tasks = images * group * rowBlocks * colBlocks;
    parallelFor(0, tasks, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t cb = t % colBlocks;
        const std::int64_t rb = (t / colBlocks) % rowBlocks;
        const std::int64_t gi = (t / (colBlocks * rowBlocks)) % group;
        const std::int64_t ni = t / (colBlocks * rowBlocks * group);
        const std::int64_t m0 = gi * mPerG + rb * kRowBlock;
        const std::int64_t rows = std::min(kRowBlock, mPerG - rb * kRowBlock);
        const std::int64_t j0 = cb * kColBlock;
        const std::int64_t cols = std::min(kColBlock, outVolume - j0);
        // B: this image's and group's im2col rows [cPerG * kernelVolume, outVolume] (or X's channels).
        const double* b = pointwise ? x + ((n0 + ni) * channels + gi * cPerG) * inVolume
                                    : col + (ni * channels + gi * cPerG) * kernelVolume * outVolume;
        gemmTile(rows, cols, depth, w + m0 * depth, depth, b + j0, outVolume,
                 y + ((n0 + ni) * filters + m0) * outVolume + j0, outVolume, bias != nullptr ? bias + m0 : nullptr);
      }
    });
  }
}

}  // namespace strata::cpu
