// FP8 block-scaled weights: the checkpoint format of DeepSeek-V3, Kimi-K2 and DeepSeek-V4
// (transformers' fine-grained "fp8" quantization_config, `weight_block_size` [128, 128]).
//
// A [R, C] weight is stored as E4M3 codes [R, C] plus one f32 `weight_scale_inv` per block of
// block.rows × block.cols elements, [ceil(R / block.rows), ceil(C / block.cols)] (edge blocks are
// partial):
//   W[i, j] = decode_e4m3(codes[i, j]) · scale_inv[i / block.rows, j / block.cols]   (in f32)
// Quantization is DeepSeek's reference (`weight_quant` / `act_quant`): per block,
// scale_inv = amax / 448 and codes = round-to-nearest-even(x / scale_inv), both in f32, with the
// e4m3 codec of mx/format.h. Two choices the reference leaves open: an all-zero block gets
// scale_inv 1 (codes 0), so nothing divides by zero; a block holding NaN or Inf gets scale_inv
// NaN and every code NaN (0x7F), so a bad value is never hidden (as MX blocks, §4 "MXFP8").
// Requantizing a dequantized block whose largest code is ±448 gives back the same codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hp::mx {

// quantization_config.weight_block_size: [rows, cols] of one scale block.
struct Fp8BlockSize {
  int64_t rows = 128, cols = 128;
};

// The scale tensor's shape for a [rows, cols] weight: [ceil(rows / b.rows), ceil(cols / b.cols)].
std::vector<int64_t> fp8_block_scale_shape(int64_t rows, int64_t cols, Fp8BlockSize b);

// The scale tensor's name for weight `weight_name` ("….weight" → "….weight_scale_inv").
std::string fp8_block_scale_name(const std::string& weight_name);

// codes [rows, cols] (E4M3 bytes), scale_inv [fp8_block_scale_shape] → out [rows, cols] f32.
void fp8_block_dequantize(const uint8_t* codes, const float* scale_inv, int64_t rows, int64_t cols,
                          Fp8BlockSize b, float* out);

// x [rows, cols] f32 → codes [rows, cols] (E4M3 bytes), scale_inv [fp8_block_scale_shape].
void fp8_block_quantize(const float* x, int64_t rows, int64_t cols, Fp8BlockSize b, uint8_t* codes,
                        float* scale_inv);

}  // namespace hp::mx
