// The fast CPU paths' record dequantization (cpu_common/dequant.h) against the codec every backend
// shares (formats::decode_unit, widened from bf16): bit for bit, for every format and every
// instruction-set build of the payload decoding this CPU runs, over records of random bytes (every e4m3 / int8 / fp4 code, NaN codes included, in every position) with random
// scales, scales at the edges of their range (subnormal and overflowing products), and zeros.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cpu_common/dequant.h"
#include "formats/record_codec.h"

namespace latentkv::cpu_common {
namespace {

template <CacheFormat F>
void check_format(const char* name, CpuIsa isa) {
  SCOPED_TRACE(name);
  SCOPED_TRACE(cpu_isa_name(isa));
  const PayloadFn payload = payload_fn(isa);
  constexpr formats::CodecLayout L = formats::codec_layout(F);
  std::mt19937 rng(11);
  std::vector<uint8_t> data(L.bytes_per_token + 64), scale(64);
  uint16_t ref_row[L.d_qk];
  float got[L.d_qk];
  int64_t checked = 0;
  for (int rep = 0; rep < 400; ++rep) {
    for (uint8_t& b : data) b = static_cast<uint8_t>(rng());
    // Records start at every offset mod 16 (cache records sit at multiples of 656, 584, ... bytes:
    // the lane loads must not assume alignment).
    const int off = rep % 16;
    // Payload byte rep % payload_bytes takes the value rep: over the first 256 records every byte
    // value occurs (for v41_fp4 every code in both nibbles); the random bytes cover the rest.
    data[off + rep % L.payload_bytes] = static_cast<uint8_t>(rep);
    for (uint8_t& b : scale) b = static_cast<uint8_t>(rng());
    if constexpr (F == CacheFormat::v32_fp8) {
      // fp32 scales: powers of two across the whole range (2^-149 .. 2^127), and arbitrary floats.
      for (int g = 0; g < L.num_groups; ++g) {
        const uint32_t bits = rep % 3 == 0 ? static_cast<uint32_t>(rng()) : static_cast<uint32_t>((rng() % 255) << 23);
        formats::store_u32_le(scale.data() + 4 * g, bits);
      }
      // And signed zeros, infinities and NaN of either sign as whole scales (zero products keep
      // the sign of code and scale).
      constexpr uint32_t kSpecial[] = {0x80000000u, 0x00000000u, 0x7f800000u, 0xff800000u, 0xffc00000u, 0x7fc00001u};
      if (rep % 5 == 1) formats::store_u32_le(scale.data() + 4 * (rep % L.num_groups), kSpecial[rep % 6]);
    }
    if (rep == 1) std::fill(data.begin(), data.end(), uint8_t{0});
    const uint8_t* sc = scale.data();  // (both sides read the scales from here)
    for (int u = 0; u < L.num_units; ++u) formats::decode_unit<F>(u, data.data() + off, sc, ref_row);
    dequantize_record_f32<F>(data.data() + off, sc, got, payload);
    for (int d = 0; d < L.d_qk; ++d) {
      const float want = num::bf16_to_f32(ref_row[d]);
      uint32_t a, b;
      std::memcpy(&a, &got[d], 4);
      std::memcpy(&b, &want, 4);
      ASSERT_EQ(a, b) << "record " << rep << " dim " << d;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 400 * L.d_qk);
}

TEST(CpuDequant, LaneDecodeMatchesTheCodecBitForBit) {
  int builds = 0;
  for (CpuIsa isa : {CpuIsa::kSse4, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!cpu_supports(isa)) continue;
    ++builds;
    check_format<CacheFormat::v32_fp8>("v32_fp8", isa);
    check_format<CacheFormat::v4_fp8>("v4_fp8", isa);
    check_format<CacheFormat::v4_int8>("v4_int8", isa);
    check_format<CacheFormat::v41_fp8>("v41_fp8", isa);
    check_format<CacheFormat::v41_fp4>("v41_fp4", isa);
  }
  EXPECT_GE(builds, 1);  // the baseline build runs on every x86-64-v2 CPU
}

}  // namespace
}  // namespace latentkv::cpu_common
