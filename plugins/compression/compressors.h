#pragma once

// The built-in compressors' factories (compressor_spec.cpp's makeCompressor calls them), one file each.

#include <memory>

#include "compressor_spec.h"
#include "strata/dtype.h"

namespace strata::compression {

std::unique_ptr<GradientCompressor> makeHalfPrecision(CompressorSpec& spec, DType wire);
std::unique_ptr<GradientCompressor> makeTopK(CompressorSpec& spec);
std::unique_ptr<GradientCompressor> makeRandomK(CompressorSpec& spec);
std::unique_ptr<GradientCompressor> makeSign(CompressorSpec& spec);
std::unique_ptr<GradientCompressor> makePowerSgd(CompressorSpec& spec);

}  // namespace strata::compression
