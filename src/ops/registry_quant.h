// The registry's quantization ops (ops/registry.h): e4m3 encode/decode, FP8 block and INT8
// channel weight quantization, FP8 per-group and INT8 per-token activation quantization, and the
// W8A8 GEMMs as ops::Linear runs them on a quantized Matrix (quant/quant.h). References are fp64:
// the nearest e4m3 / int8 value (fp64, ties to even) of the fp32 quotient by the stored scale, and the fp64
// product of the dequantized operands.
#pragma once

#include <vector>

#include "ops/registry.h"

namespace gyre::ops {

std::vector<OpSpec> QuantOpSpecs();

}  // namespace gyre::ops
