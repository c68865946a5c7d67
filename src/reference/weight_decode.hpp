#pragma once
// Decoding of plain-layout quantized weights (reference.hpp, QuantizedMatrix) to fp32, a few rows
// at a time so that a production-sized expert never needs a full fp32 copy.
#include <cstdint>

#include "megamoe/reference.hpp"

namespace megamoe::reference::detail {

// Writes rows [row0, row0 + nrows) of expert `expert` to out[nrows * cols]. The nvfp4 global
// scale is NOT applied (the kernels apply it after accumulation; matrix_global_scale gives it);
// every other format is fully dequantized. Values equal formats::dequantize_* bit for bit.
void decode_rows(const QuantizedMatrix& m, std::int64_t expert, std::int64_t row0,
                 std::int64_t nrows, float* out);

// nvfp4: global_scales[expert]; 1 for the other formats.
float matrix_global_scale(const QuantizedMatrix& m, std::int64_t expert);

// Throws InvalidArgument (argument `name`) unless m holds E x [rows, cols] in `format`.
void validate_matrix(const QuantizedMatrix& m, const char* name, Format format,
                     Fp8ScaleKind fp8_scale, std::int64_t experts, std::int64_t rows,
                     std::int64_t cols);

}  // namespace megamoe::reference::detail
