// decode/sm90/records.cuh: a block's quantized key records, from global memory into registers
// (load_raw) and dequantized into a key stage of the Hopper kernels (store_dequantized), and which
// lanes handle which token. The conversion itself is in dequant.cuh.
#pragma once

#include <cstdint>

#include "decode/cuda/kernel.cuh"
#include "decode/sm90/config.h"
#include "decode/sm90/dequant.cuh"
#include "decode/sm90/ptx.cuh"

namespace latentkv::decode::sm90 {

using cuda::KeyStorage;

// Record geometry per quantized storage, read from the portable kernel's table (cuda::StorageTraits
// in decode/cuda/kernel.cuh), so that both kernels take a format's layout from one place: dims
// stored as e4m3, dims per scale, byte offset and count of the bf16 RoPE dims (v41: none), bytes of
// the record's data row (v4's scales are elsewhere in the page).
template <KeyStorage S>
struct Rec {
  using T = cuda::StorageTraits<S>;
  static constexpr int kNope = T::kNope, kGroup = T::kGroup, kRope = T::kRopeOffset, kRopeDims = T::kRopeDims,
                       kBytes = T::kDataChunks * 16;
};

// The raw bytes one lane holds for one token of a block, when kLanes lanes share each token.
// Lane `part` of a token holds the 16-byte e4m3 chunks c = part + kLanes i and the 16-byte RoPE
// units part + kLanes u, so the token's lanes read whole 64-byte (4 lanes) or 128-byte (8 lanes)
// runs of its record.
// kLanes = 4 (lanes4: the default): lane l of warp w handles token 8 w + l % 8
// and chunks c = l / 8 + 4 i; the eight lanes of a quarter-warp store to eight rows of the swizzled
// tile, which land in eight different bank groups. A CTA pair (the two head blocks of one query row
// in a cluster) splits every block by token: the CTA of cluster rank r dequantizes tokens 32 r ..
// 32 r + 31 whole and writes them into both CTAs' stages, so the per-token work (scales, fast-path
// check, addresses, RoPE) is done once per token, as without pairs.
// kLanes = 8 (lanes8): 128-byte runs per token and load instruction, so that a warp's load of a
// chunk touches ~7.5 cache lines for its 512 bytes instead of ~11 (records are 16-byte aligned);
// the kernel's layout for V3.2 records (kernel.cuh, kWide: every lane two tokens of 8 lanes, the
// same 8 chunks per lane). v4 records have 28 chunks, so lanes 4-7 of a token would have 3
// (has_chunk); the kernel keeps v4 at 4 lanes, which measured faster.
template <KeyStorage F, int kLanes = 4>
struct Raw {
  static_assert(kLanes == 4 || kLanes == 8, "4 or 8 lanes per token");
  static constexpr int kAllChunks = Rec<F>::kNope / 16;                   // per token: 32 (v32, v41) or 28 (v4)
  static constexpr int kNopeChunks = (kAllChunks + kLanes - 1) / kLanes;  // per lane: 8 / 7 (4 lanes), 4 (8 lanes)
  static constexpr int kRopeUnits = Rec<F>::kRopeDims > 0 ? 8 / kLanes : 0;  // 64 bf16 dims = 8 units per token
  // Whether lane `part` has chunk i (false only for the last chunk of v4's lanes 4-7 of 8).
  static constexpr bool kEven = kAllChunks % kLanes == 0;
  __device__ __forceinline__ static bool has_chunk(int i, int part) {
    if constexpr (kEven) return true;
    else return i < kNopeChunks - 1 || part + kLanes * i < kAllChunks;
  }
  uint4 nope[kNopeChunks];
  uint4 rope[kRopeUnits > 0 ? kRopeUnits : 1];  // (v41: none, the array unused)
  // v32: 4 fp32 scales; v4: 8 ue8m0 bytes in .x, .y; v41: 16 ue8m0 bytes. kV41Mixed (4 lanes): the
  // lane's 8 scale bytes, chunk i's in byte i % 4 of .x (i < 4) or .y, and in .z the token's kind
  // (1: a v41_fp4 record, whose chunk i is then 8 bytes of e2m1 pairs in nope[i].x, .y and whose
  // scale bytes are e4m3; 0: v41_fp8, ue8m0 scales): no register beyond v41_fp8's (the narrow
  // kernel runs at its 128-register bound).
  uint4 scale;
};
// kV41Mixed: whether the token held by r is a v41_fp4 record (load_raw).
template <KeyStorage F, int kLanes>
__device__ __forceinline__ bool holds_fp4(const Raw<F, kLanes>& r) {
  return F == KeyStorage::kV41Mixed && r.scale.z != 0u;
}
// Byte k (k < 4) of each of four words, in their order: three byte permutes (num::prmt).
__device__ __forceinline__ uint32_t byte_k_of_each(const uint4 w, uint32_t k) {
  const uint32_t sel = k | ((k + 4u) << 4);  // bytes k of a and of b to bytes 0 and 1
  return num::prmt(num::prmt(w.x, w.y, sel), num::prmt(w.z, w.w, sel), 0x5410u);
}
// Bytes a CTA of a pair writes into its peer's stage per block: 32 whole tokens of d_qk bf16 dims.
template <int kDqk>
inline constexpr uint32_t kPairPeerBytes = 32u * kDqk * 2u;

// A lane's token and part.
struct TokenLane {
  int tok, part;
};
// 4 lanes per token: lane `lane` of the group's warp `w` takes token first + 8 w + lane % 8.
__device__ __forceinline__ TokenLane lanes4(int first, int w, int lane) { return {first + 8 * w + lane % 8, lane / 8}; }
// 8 lanes per token: a warp takes tokens first + 4 w .. + 3; each quarter-warp holds two tokens (rows
// 2 k and 2 k + 1 of the tile) with parts 0-3 of one and 4-7 of the other, so its eight 16-byte
// stores of a chunk (units 2 (part % 4) of tile 2 i + part / 4) and of a RoPE unit (unit part) fall
// in eight different bank groups after the row swizzle.
__device__ __forceinline__ TokenLane lanes8(int first, int w, int lane) {
  const int half = (lane / 4) % 2;  // which token of the quarter-warp's pair
  return {first + 4 * w + 2 * (lane / 16) + half, lane % 4 + 4 * (half ^ ((lane / 8) % 2))};
}

// One 16- or 8-byte record load, through the L1 (ld.global.nc). Loading without L1 allocation
// (ld.global.nc.L1::no_allocate) measured 25-35% slower on V3.2, 9-21% on V4: the lines a
// load instruction shares with its neighbours' are served from the L1 (bench/NOTES.md v21; the
// variant's code at 1f2c270).
__device__ __forceinline__ uint4 load_record16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }
__device__ __forceinline__ uint2 load_record8(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

template <KeyStorage F, int kLanes>
__device__ __forceinline__ void load_raw(Raw<F, kLanes>& r, const uint8_t* data, const uint8_t* scale, int part) {
  using R = Raw<F, kLanes>;
  if (!data) {
#pragma unroll
    for (int i = 0; i < R::kNopeChunks; ++i) r.nope[i] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < R::kRopeUnits; ++u) r.rope[u] = make_uint4(0, 0, 0, 0);
    // Scale 1 (fp32 1.0 / ue8m0 127): the zero payload stays zero on the fast path.
    r.scale = F == KeyStorage::kV32Fp8   ? make_uint4(0x3f800000u, 0x3f800000u, 0x3f800000u, 0x3f800000u)
              : F == KeyStorage::kV41Fp8 ? make_uint4(0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu, 0x7f7f7f7fu)
                                         : make_uint4(0x7f7f7f7fu, 0x7f7f7f7fu, 0, 0);  // (kV41Mixed: fp8)
    return;
  }
  if constexpr (F == KeyStorage::kV41Mixed) {
    // Read by 4 lanes per token only: the 8-lane layouts (kWide) take V3.2 records alone, so this
    // storage's 8-lane form is compiled (the kernels' lambdas name it) but never run.
    if constexpr (kLanes != 4) {
      __trap();
    } else {
      static_assert(R::kNopeChunks == 8, "32 chunks over 4 lanes");
      if (cuda::is_fp4_record(data, scale)) {
        // A v41_fp4 record (288 bytes): chunk c = part + 4 i is bytes 8 c .. 8 c + 7 and its scale
        // byte 256 + c, byte `part` of the scales' word i. Nothing past byte 287 is read.
        const uint4 s0 = load_record16(scale), s1 = load_record16(scale + 16);
#pragma unroll
        for (int i = 0; i < R::kNopeChunks; ++i) {
          const uint2 d = load_record8(data + 8 * (part + kLanes * i));
          r.nope[i] = make_uint4(d.x, d.y, 0, 0);
        }
        const uint32_t k = static_cast<uint32_t>(part);
        r.scale = make_uint4(byte_k_of_each(s0, k), byte_k_of_each(s1, k), 1u, 0u);
      } else {
        // A v41_fp8 record: chunk c = part + 4 i uses ue8m0 byte c / 2 = part / 2 + 2 i of the 16,
        // bytes h and h + 2 (h = part / 2) of word i / 2.
#pragma unroll
        for (int i = 0; i < R::kNopeChunks; ++i) r.nope[i] = load_record16(data + 16 * (part + kLanes * i));
        const uint4 s = load_record16(scale);
        const uint32_t sel = part < 2 ? 0x6420u : 0x7531u;  // bytes h, h + 2 of a, then of b
        r.scale = make_uint4(num::prmt(s.x, s.y, sel), num::prmt(s.z, s.w, sel), 0u, 0u);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < R::kNopeChunks; ++i)
      r.nope[i] = R::kEven || R::has_chunk(i, part) ? load_record16(data + 16 * (part + kLanes * i))
                                                    : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < R::kRopeUnits; ++u)
      r.rope[u] = load_record16(data + Rec<F>::kRope + 16 * (part + kLanes * u));
    if constexpr (F == KeyStorage::kV32Fp8 || F == KeyStorage::kV41Fp8) {
      r.scale = load_record16(scale);  // 16 bytes inside the record
    } else {
      const uint2 s = load_record8(scale);
      r.scale = make_uint4(s.x, s.y, 0, 0);
    }
  }
}

// A record's lines (and a separate scale's) into L2: each 128-byte step of the record and its last
// byte, so every line it touches (warps 4-5 of kernel.cuh, when they resolve its pointer).
template <KeyStorage F>
__device__ __forceinline__ void prefetch_record(const uint8_t* data, const uint8_t* scale) {
  constexpr int kBytes = Rec<F>::kBytes;  // 656 (v32: scales inside), 576 (v4) or 528 (v41: scales inside)
  if constexpr (F == KeyStorage::kV41Mixed) {
    if (cuda::is_fp4_record(data, scale)) {  // 288 bytes: no line past the record's end
      constexpr int kFp4Bytes = cuda::StorageTraits<F>::kFp4Chunks * 16;
#pragma unroll
      for (int off = 0; off < kFp4Bytes; off += 128) prefetch_l2(data + off);
      prefetch_l2(data + kFp4Bytes - 1);
      return;
    }
  }
#pragma unroll
  for (int off = 0; off < kBytes; off += 128) prefetch_l2(data + off);
  prefetch_l2(data + kBytes - 1);
  if constexpr (F == KeyStorage::kV4Fp8) prefetch_l2(scale);
}

// Stage offset of dims 16 c + d .. 16 c + d + 7 (d 0 or 8) of a lane's chunk c = part + kLanes i:
// units 2 (c % 4) and 2 (c % 4) + 1 of tile c / 4, row tok.
template <int kLanes>
__device__ __forceinline__ uint32_t chunk_offset(int i, int tok, int part, int d) {
  if constexpr (kLanes == 4) return i * kChunkBytes + sw128_offset(tok, 16 * part + d);
  else return (2 * i + part / 4) * kChunkBytes + sw128_offset(tok, 16 * (part % 4) + d);
}

// Writes one token's dequantized dims into a key stage ([chunks][64 rows][64 dims], swizzled). A CTA
// pair (kMirror) also writes them at the same offsets of the peer's stage: `peer_delta` is the
// peer's shared::cluster address of this CTA's shared-memory byte 0, minus that byte's own address.
// kWholeToken: one fast-path check for all of the lane's chunks, then a branch-free run over them
// (false: a check per chunk, fewer live registers). kAsyncPeer (the warp-specialised kernel's
// pairs): the peer's copy goes by st.async and completes on the peer's mbarrier `peer_bar`
// (shared::cluster address) instead of a plain remote store ordered by a cluster barrier.
template <KeyStorage F, bool kMirror = false, bool kWholeToken = true, bool kAsyncPeer = false, int kLanes = 4>
__device__ __forceinline__ void store_dequantized(const Raw<F, kLanes>& r, uint8_t* stage, int tok, int part,
                                                  uint32_t peer_delta = 0, uint32_t peer_bar = 0) {
  using R = Raw<F, kLanes>;
  const uint32_t stage_addr = static_cast<uint32_t>(__cvta_generic_to_shared(stage));
  auto put = [&](uint32_t offset, uint4 v) {
    *reinterpret_cast<uint4*>(stage + offset) = v;
    if constexpr (kMirror && kAsyncPeer) st_async_peer(stage_addr + offset + peer_delta, v, peer_bar);
    else if constexpr (kMirror) st_shared_cluster(stage_addr + offset + peer_delta, v);
  };
  if constexpr (F == KeyStorage::kV41Mixed) {
    if (holds_fp4(r)) {
      if constexpr (kLanes != 4) {  // (never run: load_raw's note)
        __trap();
      } else {
        // A v41_fp4 token: each chunk's codes times its e4m3 scale by two exact bf16x2 multiplies
        // (dequant16_e2m1_bf16), the scale converted by the hardware (NaN codes included:
        // num::e4m3_to_f32's value) and exact in bf16.
#pragma unroll
        for (int i = 0; i < R::kNopeChunks; ++i) {
          const uint32_t code = ((i < 4 ? r.scale.x : r.scale.y) >> (8 * (i % 4))) & 0xffu;
          const float s = cuda::e4m3x2_to_f32(static_cast<uint16_t>(code)).x;
          uint4 lo, hi;
          dequant16_e2m1_bf16(r.nope[i].x, r.nope[i].y, cuda::pack_bf16(s, s), lo, hi);
          put(chunk_offset<kLanes>(i, tok, part, 0), lo);
          put(chunk_offset<kLanes>(i, tok, part, 8), hi);
        }
      }
      return;
    }
  }
  // Each chunk group's scale; then one check for the whole token, so that the common case runs
  // its chunks without a branch between them (the compiler interleaves their conversions).
  float sc[R::kNopeChunks];
  uint32_t e8[R::kNopeChunks];  // v4, v41: the ue8m0 scale bytes
  constexpr bool kUe8m0 = F != KeyStorage::kV32Fp8;
  bool fast = kWholeToken;
  // The NaN flags of the whole token, two instructions per word (nan_bits16), masked once below
  // rather than tested per chunk (V4 b 64 4-5% faster: bench/NOTES.md, v17).
  uint32_t nan_bits = 0;
#pragma unroll
  for (int i = 0; i < R::kNopeChunks; ++i) {
    if constexpr (F == KeyStorage::kV32Fp8) {
      // 128 dims per scale: chunk c uses scale c / 8, that is (kLanes i) / 8 (part < kLanes <= 8).
      const uint32_t sb[4] = {r.scale.x, r.scale.y, r.scale.z, r.scale.w};
      sc[i] = __uint_as_float(sb[kLanes * i / 8]);
    } else if constexpr (F == KeyStorage::kV41Mixed) {
      // The lane's 8 ue8m0 bytes, chunk i's in byte i % 4 of .x or .y (load_raw).
      e8[i] = ((i < 4 ? r.scale.x : r.scale.y) >> (8 * (i % 4))) & 0xffu;
      sc[i] = num::ue8m0_to_f32(static_cast<uint8_t>(e8[i]));
    } else if constexpr (F == KeyStorage::kV41Fp8) {
      // 32 dims per scale: chunk c uses byte c / 2 = (part + kLanes i) / 2 of the 16, in word
      // (kLanes i) / 8 (part < kLanes).
      const uint32_t sb[4] = {r.scale.x, r.scale.y, r.scale.z, r.scale.w};
      e8[i] = (sb[kLanes * i / 8] >> (8 * (((part + kLanes * i) / 2) % 4))) & 0xffu;
      sc[i] = num::ue8m0_to_f32(static_cast<uint8_t>(e8[i]));
    } else {
      // 64 dims per scale: chunk c uses byte c / 4 (4 lanes: byte i; 8 lanes: 2 i + part / 4, in
      // the same word for both parts).
      const int first = kLanes * i / 4;
      const uint32_t word = first < 4 ? r.scale.x : r.scale.y;
      if constexpr (kLanes == 4) e8[i] = (word >> (8 * (i % 4))) & 0xffu;
      else e8[i] = (word >> (8 * (first % 4 + part / 4))) & 0xffu;
      sc[i] = num::ue8m0_to_f32(static_cast<uint8_t>(e8[i]));
    }
    if (kWholeToken) {
      nan_bits |= nan_bits16(r.nope[i]);
      if (R::kEven || R::has_chunk(i, part)) {  // a missing chunk's scale byte may be anything
        if constexpr (kUe8m0) fast = fast && ue8m0_fast(e8[i]);
        else fast = fast && fast_scale(sc[i]);
      }
    }
  }
  if (kWholeToken) fast = fast && (nan_bits & 0x80808080u) == 0;
  if (fast) {
#pragma unroll
    for (int i = 0; i < R::kNopeChunks; ++i) {
      if (!(R::kEven || R::has_chunk(i, part))) continue;
      uint4 lo, hi;
      if constexpr (kUe8m0) dequant16_fast(r.nope[i], ue8m0_multiplier(e8[i]), lo, hi);
      else dequant16_fast(r.nope[i], fast_multiplier(sc[i]), lo, hi);
      put(chunk_offset<kLanes>(i, tok, part, 0), lo);
      put(chunk_offset<kLanes>(i, tok, part, 8), hi);
    }
  } else {
#pragma unroll
    for (int i = 0; i < R::kNopeChunks; ++i) {
      if (!(R::kEven || R::has_chunk(i, part))) continue;
      uint4 lo, hi;
      dequant16(r.nope[i], sc[i], lo, hi);
      put(chunk_offset<kLanes>(i, tok, part, 0), lo);
      put(chunk_offset<kLanes>(i, tok, part, 8), hi);
    }
  }
#pragma unroll
  for (int u = 0; u < R::kRopeUnits; ++u) {
    const int dim = Rec<F>::kNope + 8 * (part + kLanes * u);
    put((dim / 64) * kChunkBytes + sw128_offset(tok, dim % 64), r.rope[u]);
  }
}

}  // namespace latentkv::decode::sm90
