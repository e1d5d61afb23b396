// decode/sm90/config.h: tile constants and the shared-memory layout of the Hopper (sm_90a) sparse
// decode kernel (kernel.cuh), with the reason for each number. No CUDA headers.
#pragma once

#include <cstdint>

namespace latentkv::decode::sm90 {

// 64 query heads per CTA: one wgmma M tile. MLA decode is MQA, so each dequantized token in shared
// memory serves all 64 rows; h_q > 64 runs one CTA per 64-head block (launched next to each other so
// that the second CTA's gather of the same tokens hits L2).
inline constexpr int kHeads = 64;
// Two warpgroups, no producer warpgroup: warpgroup 0 computes S = Q K^T, the softmax and
// O[:, 0:256]; warpgroup 1 computes O[:, 256:512] and resolves the candidates. Both gather and
// dequantize half of the next block while warpgroup 0's score product runs on the tensor cores
// (wgmma is asynchronous; with V3.2 records warpgroup 0 converts half of its share under the value
// product instead), so the CUDA-core work overlaps the MMAs without warp specialisation.
// (Measured on the H200: warpgroup 1 dequantizing the whole block alone was 12 % slower on V3.2; it
// then sets the pace.) 256 threads leave 255 registers per thread: O half (64 x 256 fp32 / 128
// threads) = 128, S = 32, P fragments 16, the next block's raw records = 44.
inline constexpr int kThreads = 256;
// Tokens per block: the N of the score wgmma (m64n64k16). N = 64 keeps the SS score product at the
// shared-memory pipe's rate (4 KB read per 32 clocks); a narrower N would be bound by it.
inline constexpr int kBlockTokens = 64;
// One 128-byte-swizzled chunk: [64 rows][64 bf16]. Q and every key stage are d_qk / 64 chunks.
inline constexpr int kChunkBytes = 64 * 128;
// The swizzle atom (8 rows x 128 B) must start 1024-byte aligned; the dynamic shared memory base is
// rounded up at run time, and this much slack is allocated for it.
inline constexpr int kAlignSlack = 1024;

// The softmax's lazy rescale (kernel.cuh online_softmax): a row's exponent base moves only when a
// block's maximum exceeds it by more than kRescaleSlack (log2 units), so P <= 2^8 and O is rescaled
// almost only after the first block, instead of in every block where any of a warp's 16 rows found
// a new maximum (on random scores: most of the first blocks of a row). bf16 rounds P relative to
// its magnitude, so the values keep their precision; fp32 sums and O hold the 2^8 with room to
// spare. The rows' true maxima are kept beside the bases for max_logits, and at the end go to the
// alpha array (free once the last block's product has read it), so the layout does not grow.
// Against rescaling at every new maximum, one alternating run: decode 0.8-3.0%, prefill 2.3-3.4%,
// dense 0-2.6% faster (bench/NOTES.md v23).
inline constexpr float kRescaleSlack = 8.0f;

template <int kDqk>
struct Layout {
  static constexpr int chunks = kDqk / 64;                // 9 (v32_fp8) or 8 (v4_fp8)
  static constexpr int q_off = 0;                         // Q [64][d_qk] bf16, swizzled chunks
  // K [2 stages][64][d_qk] bf16. Reused where no product reads it: the end of an unsplit CTA stages
  // each warp's 16 rows of bf16 out in 8 KB windows (8 warps: 64 KB, within stage 0; 16-byte
  // stores then write whole rows), and the prologue of quantized keys parks block 1's 128
  // pointers (1 KB) at the start of stage 1 until the first iteration fills it.
  static constexpr int k_off = q_off + chunks * kChunkBytes;
  static constexpr int k_stage = chunks * kChunkBytes;
  static constexpr int p_off = k_off + 2 * k_stage;       // P [64][64] bf16, one swizzled chunk
  static constexpr int ptr_off = p_off + kChunkBytes;     // a block's record and scale pointers
  static constexpr int valid_off = ptr_off + 2 * kBlockTokens * 8;  // u32 [4 blocks][2]: attended
  static constexpr int alpha_off = valid_off + 32;        // f32 [64]: per-row rescale of a block
                                                          // (at the end: the true row maxima)
  static constexpr int stat_off = alpha_off + kHeads * 4;  // f32 [2][64]: final exponent base, sum
  static constexpr int used = stat_off + 2 * kHeads * 4;
  static constexpr int total = used + kAlignSlack;
};
// The epilogue reads a row's true maximum at sRowMax[r - kHeads] (kernel.cuh publish_row_stats).
static_assert(Layout<576>::stat_off == Layout<576>::alpha_off + kHeads * 4 &&
                  Layout<512>::stat_off == Layout<512>::alpha_off + kHeads * 4,
              "the row stats must follow the alpha array");
static_assert(Layout<576>::total <= 227 * 1024, "v32_fp8 layout must fit an H100/H200 CTA");
static_assert(Layout<512>::total <= 227 * 1024, "v4_fp8 layout must fit an H100/H200 CTA");

// ---- The narrow kernel (narrow.cuh): CTAs of at most 16 query rows, the tokens as wgmma's M.
// Where a CTA has at most 16 real rows (tensor-parallel shards of V3.2's 128 heads, dense decode of
// h_q 16 at s_q 1), the kernel above still pays for 64: M is 64 in every wgmma shape, and its
// 227 KB layout holds one CTA per SM. With the tokens as M (S^T = K Q^T and O^T = V^T P^T,
// m64n16k16), Q is 16 rows, O^T is 32 fp32 registers per thread and one key stage suffices, so two
// CTAs share an SM and each one's gather and dequantization overlap the other's products.
inline constexpr int kNarrowRows = 16;  // N of both products
// The warp-specialised form also runs CTAs of 17-32 rows (tensor-parallel shards of 32 heads, dense
// decode of h_q 32 at s_q 1 or h_q 16 at s_q 2 packed) with N = 32 (wgmma m64n32k16). kernel.cuh
// pays for 64 rows there; here a step reads 3 KB of operands instead of 2.5 KB (~1.2x the products'
// shared-memory time per block) while the gathers and the dequantization stay the same. Only this
// form: Q is 36 KB at d_qk 576, so two CTAs of one stage (~116 KB each) would not fit the 196 KB
// carveout, and O^T is 64 fp32 registers a thread, which the consumers hold by setmaxnreg (below).
inline constexpr int kNarrowWideRows = 32;
// 256 threads, two CTAs per SM: __launch_bounds__(256, 2) leaves 128 registers per thread. O^T 32,
// S^T 8 (warpgroup 0), one block of raw records 48 (v32: two tokens of 8 lanes, each 4 NoPE + 1
// RoPE + 1 scale uint4) or 40 (v4: one token of 4 lanes), row statistics 12, the rest addresses.
inline constexpr int kNarrowCtasPerSm = 2;
// The largest fp32 row stride of the epilogue's staging buffer that keeps the fragment's writes
// free of bank conflicts: rows 2 (lane % 4) land 4 x 2 banks apart, dims lane / 4 on consecutive
// banks.
inline constexpr int kNarrowOutStride = 516;

// kStages key stages: 1 for the two-CTA form, 2 for the warp-specialised one (below); kRows the
// query rows (N of both products): kNarrowRows, or kNarrowWideRows in the warp-specialised form.
template <int kDqk, int kStages = 1, int kRows = kNarrowRows>
struct NarrowLayout {
  static constexpr int rows = kRows;
  static constexpr int chunks = kDqk / 64;
  static constexpr int q_chunk = kRows * 128;                     // [rows][64 bf16] swizzled
  static constexpr int q_off = 0;                                  // Q [chunks][rows][64] bf16
  static constexpr int k_off = q_off + chunks * q_chunk;          // key stages [chunks][64][64] bf16
  static constexpr int k_stage = chunks * kChunkBytes;
  static constexpr int p_off = k_off + kStages * k_stage;         // P [rows][64 tokens] bf16
  static constexpr int ptr_off = p_off + kRows * 128;             // [2 blocks] record and scale pointers
  static constexpr int valid_off = ptr_off + 2 * 2 * kBlockTokens * 8;  // u32 [4 blocks][2]: attended
  static constexpr int red_off = valid_off + 32;                  // f32 [4 warps][rows]: block maxima, sums
  static constexpr int alpha_off = red_off + 4 * kRows * 4;       // f32 [rows]: a block's rescale
  static constexpr int stat_off = alpha_off + kRows * 4;          // f32 [2][rows]: final base, true maximum
  static constexpr int lim_off = stat_off + 2 * kRows * 4;        // i64 [rows]: packed causal rows' limits
  static constexpr int idx_off = lim_off + kRows * 8;             // i32 [2][64]: two blocks' indices in flight
  static constexpr int bar_off = idx_off + 2 * kBlockTokens * 4;  // u64 full[2], empty[2] (2 stages only)
  static constexpr int used = bar_off + (kStages > 1 ? 32 : 0);
  static constexpr int total = used + kAlignSlack;
  // The epilogue stages [rows][kNarrowOutStride] fp32 in the key stages (free by then).
  static_assert(kRows * kNarrowOutStride * 4 <= kStages * k_stage, "the narrow epilogue's staging must fit the key stages");
};
// Two CTAs per SM must fit the 196 KB shared-memory carveout (200,704 bytes, 1 KB of it reserved per
// CTA): a layout past that takes the 228 KB one, which leaves the L1 ~28 KB instead of ~60, and the
// gathered lines pass through the L1 while in flight: a probe of this loop with a 4 KB larger layout
// (99,712 B) took 1.24x as long (bench/NOTES.md v40 item 5).
inline constexpr int kNarrowSmemLimit = 200704 / kNarrowCtasPerSm - 1024;
static_assert(NarrowLayout<576>::total <= kNarrowSmemLimit, "two v32_fp8 narrow CTAs must fit the 196 KB carveout");
static_assert(NarrowLayout<512>::total <= kNarrowSmemLimit, "two v4_fp8 narrow CTAs must fit the 196 KB carveout");
// The warp-specialised form (launch.h narrow_form: by default for dense decode's pages): one CTA
// per SM of 512 threads, two key stages. Warpgroups 2-3 resolve, gather and dequantize block n + 1
// into one stage while warpgroups 0-1 run block n's products and softmax on the other, handing
// stages over by mbarriers; in the two-CTA form a CTA's phases run in series and only the other
// CTA fills the gaps. The same per-role work and registers as the two-CTA form (512 threads at one
// CTA per SM leave 128 each), about the same shared memory per SM (172 KB for v32_fp8: within the
// 196 KB carveout, so the L1 keeps its share). On an H100: dense v32_fp8 pages h_q 16 0.95-0.98x
// the two-CTA form's time in three runs, the tensor-parallel h_q 16 case level or slower
// (bench/NOTES.md v60, v62).
inline constexpr int kNarrowWsThreads = 512;
static_assert(NarrowLayout<576, 2>::total <= 200704 - 1024, "the warp-specialised v32_fp8 layout must fit the 196 KB carveout");
static_assert(NarrowLayout<512, 2>::total <= 200704 - 1024, "the warp-specialised v4_fp8 layout must fit the 196 KB carveout");
static_assert(NarrowLayout<576, 2, kNarrowWideRows>::total <= 200704 - 1024,
              "the 32-row warp-specialised v32_fp8 layout must fit the 196 KB carveout");
static_assert(NarrowLayout<512, 2, kNarrowWideRows>::total <= 200704 - 1024,
              "the 32-row warp-specialised v4_fp8 layout must fit the 196 KB carveout");
// Registers of the 32-row form (setmaxnreg; the launch gives 128 a thread at 512 threads, so the two
// budgets must sum to at most 256): consumers O^T 64, S^T 16, row statistics 24 and the softmax's
// temporaries; loaders as in the 16-row form (one block of raw records, 48, and addresses).
inline constexpr int kNarrowWideRegsConsumer = 160, kNarrowWideRegsLoader = 96;
static_assert(kNarrowWideRegsConsumer + kNarrowWideRegsLoader <= 2 * (65536 / kNarrowWsThreads), "register pool");

}  // namespace latentkv::decode::sm90
