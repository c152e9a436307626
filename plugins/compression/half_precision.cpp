// fp16 and bf16: the bucket travels as 16-bit floats (PyTorch's fp16_compress_hook and bf16_compress_hook), half the
// bytes of float32. Stateless; runs wherever the gradients live (the cast is Tensor::convertFrom, a device kernel
// on a GPU), so it is the one compressor the CUDA backend takes today.
#include "compressors.h"

namespace strata::compression {
namespace {

class HalfPrecisionCompressor final : public GradientCompressor {
 public:
  HalfPrecisionCompressor(std::string text, DType wire) : text_(std::move(text)), wire_(wire) {}

  std::string describe() const override { return text_; }

  void prepare(const std::vector<GradientBucket>& /*buckets*/) override {}

  CompressionTraffic allReduce(GradientBucket& bucket, ProcessGroup& group,
                               std::chrono::milliseconds timeout) override {
    Tensor& gradient = bucket.gradient;
    if (!wireBuffer_.defined() || wireBuffer_.numel() < gradient.numel() || wireBuffer_.device() != gradient.device()) {
      wireBuffer_ = Tensor::empty(wire_, {gradient.numel()}, MemoryCategory::Communication, gradient.device());
    }
    Tensor wire = wireBuffer_.flatSlice(0, gradient.numel());
    wire.convertFrom(gradient);
    // Summed in 16 bits and divided after (Note [16-bit reductions] in core): within float16's range for any
    // gradient whose sum over the ranks is below 65504.
    group.allReduce(wire, ReduceOp::Average)->wait(timeout);
    gradient.convertFrom(wire);
    return {static_cast<std::int64_t>(wire.bytes()), static_cast<std::int64_t>(gradient.bytes())};
  }

  std::vector<std::pair<std::string, Tensor>> state() override { return {}; }

 private:
  std::string text_;
  DType wire_;
  Tensor wireBuffer_;  // reused across buckets: they are reduced one at a time
};

}  // namespace

std::unique_ptr<GradientCompressor> makeHalfPrecision(CompressorSpec& spec, DType wire) {
  return std::make_unique<HalfPrecisionCompressor>(spec.text(), wire);
}

}  // namespace strata::compression
