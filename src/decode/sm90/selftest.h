// decode/sm90/selftest.h: one-warpgroup checks of the sm_90a building blocks (ptx.cuh) against
// products the caller computes on the CPU (tests/cuda/test_sm90_primitives.cpp). Work in progress
// toward the Hopper decode kernel (docs/design/hopper-sparse-decode.md, step 1). No CUDA headers.
#pragma once

#include <cstdint>

namespace latentkv::decode::sm90 {

// Whether `device` runs sm_90a code (compute capability 9.0).
bool device_has_wgmma(int device);

// S[64][64] = Q[64][576] K[64][576]^T through 36 wgmma m64n64k16 with both operands in 128-byte-
// swizzled shared memory. Host arrays, row-major; q and k hold bf16 bits.
void selftest_qk(const uint16_t* q, const uint16_t* k, float* s);

// selftest_qk's product repeated 64 times by one warpgroup while a second one (mode) 0: idles,
// 1: stores 16-byte units over 72 KB of shared memory without pause (the decode kernel's
// dequantization stores beside its score product), 2: runs the same products. S as selftest_qk;
// clocks[0] / clocks[1]: each warpgroup's clocks per repetition (mode 0: clocks[1] is its idle
// span). A probe of what slows the decode kernel's score product, not a benchmark.
void selftest_qk_contention(const uint16_t* q, const uint16_t* k, float* s, int mode, long long* clocks);

// O[64][256] = P[64][64] V[64][256] through 4 wgmma m64n256k16 with V read MN-major (transposed)
// from the key tile's layout; P from shared memory (p_in_registers false) or from registers.
void selftest_pv(const uint16_t* p, const uint16_t* v, float* o, bool p_in_registers);

// The decode kernel's dequantization (dequant.cuh) of n chunks of 16 e4m3 bytes (bytes[16 n]):
// chunk i times scales[i] (v32: fp32 scales) or, when e8 is given instead, times the ue8m0 scale
// byte e8[i] (v4), to out[16 n] bf16 bits; the fast form where it is exact, the fp32 path elsewhere;
// fast[n]: 1 where chunk i took the fast form.
void selftest_dequant(const uint8_t* bytes, const float* scales, const uint8_t* e8, int n, uint16_t* out,
                      uint8_t* fast);

// One block of 64 tokens' quantized records (v4: [64][576] bytes, scales [64][8]; v32: [64][656],
// scales inside) dequantized into a key stage (records.cuh) by `layout` 0 (4 lanes per token) or 1
// (8 lanes per token, two tokens per lane: the kernel's layout for V3.2 records), tokens with
// present[t] == 0 absent (zero keys). stage_out: the stage's bytes
// ((v4 ? 8 : 9) x 8 KB), pre-filled with 0xa5 before the stores.
void selftest_token_layout(bool v4, const uint8_t* records, const uint8_t* scales, const uint8_t* present,
                           int layout, uint8_t* stage_out);

}  // namespace latentkv::decode::sm90
