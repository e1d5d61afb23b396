// The fast fp32 CPU path of compress_kv.
//
// Work split: OpenMP threads take tasks in a dynamic schedule (outputs may be skipped). A task is
// one output's window, or, when there are too few outputs to keep every thread busy
// (cpu_dim_splits), one range of its dims: dims are independent until the RMSNorm, so the pooled
// ranges go through a buffer to a second loop that writes the records, and the bytes are the same
// either way. Pooling (SPEC.md section 3, step 2; ~97% of the time) is pool.h's kernel for the
// widest instruction set this CPU runs; the record (RMSNorm, quantization, RoPE) is scalar.
#include <omp.h>

#include <cmath>
#include <vector>

#include "compress/cpu/compress_cpu.h"
#include "latentkv/error.h"

namespace latentkv::compress {
namespace {

void write_record(const Params& p, int64_t pos, const float* c, uint8_t* data, uint8_t* scales) {
  // RMSNorm: y = c * rsqrt(mean(c^2) + eps) * w, multiplied in that order.
  float sum_sq = 0.0f;
  for (int d = 0; d < kDim; ++d) sum_sq += c[d] * c[d];
  const float rstd = 1.0f / std::sqrt(sum_sq / static_cast<float>(kDim) + p.eps);
  float y[kDim];
  for (int d = 0; d < kDim; ++d) y[d] = c[d] * rstd * num::bf16_to_f32(p.rms_weight[d]);

  for (int g = 0; g < kNumGroups; ++g) {
    float z[kGroup];
    float amax = 0.0f;
    for (int k = 0; k < kGroup; ++k) {
      z[k] = num::round_bf16(y[g * kGroup + k]);
      amax = std::fmax(amax, std::fabs(z[k]));
    }
    const int e = num::compressor_scale_exp(amax, inv_qmax(p.fp8));
    const float inv_scale = num::exp2i(-e);
    for (int k = 0; k < kGroup; ++k) data[g * kGroup + k] = encode_payload(z[k] * inv_scale, p.fp8);
    scales[g] = num::ue8m0_from_exp(e);
  }
  scales[kNumGroups] = 0;

  const int64_t C = p.compress_ratio;
  const float* cs = p.cos_sin + ((pos / C) * C) * p.stride_cos_pos;
  for (int j = 0; j < kRope / 2; ++j) {
    const float u = y[kNope + 2 * j], v = y[kNope + 2 * j + 1];
    const float co = cs[j], si = cs[kRope / 2 + j];
    const uint16_t hu = num::f32_to_bf16(u * co - v * si);
    const uint16_t hv = num::f32_to_bf16(v * co + u * si);
    data[kNope + 4 * j + 0] = static_cast<uint8_t>(hu & 0xff);
    data[kNope + 4 * j + 1] = static_cast<uint8_t>(hu >> 8);
    data[kNope + 4 * j + 2] = static_cast<uint8_t>(hv & 0xff);
    data[kNope + 4 * j + 3] = static_cast<uint8_t>(hv >> 8);
  }
}

PoolFn pool_fn(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kSse4: return pool_window_sse4;
    case CpuIsa::kAvx2: return pool_window_avx2;
    case CpuIsa::kAvx512: return pool_window_avx512;
  }
  LKV_FAIL(ErrorKind::kValue, "compress_cpu_fast: unknown instruction set ",
           static_cast<int>(isa));
}

}  // namespace

void compress_cpu_fast(const Params& p, const CpuFastOptions& opt) {
  const CpuIsa isa = opt.isa ? *opt.isa : default_cpu_isa();
  LKV_CHECK(cpu_supports(isa), "compress_cpu_fast: this CPU cannot run the ", cpu_isa_name(isa),
            " build");
  const PoolFn pool = pool_fn(isa);
  const int splits =
      opt.dim_splits > 0 ? opt.dim_splits : cpu_dim_splits(p.num_outputs, omp_get_max_threads());
  LKV_CHECK(kDim % (splits * kPoolDimAlign) == 0, "compress_cpu_fast: dim_splits ", splits,
            " does not cut ", kDim, " dims into multiples of ", kPoolDimAlign);

  auto write = [&](int64_t i, const float* c) {
    const int64_t b = p.boundary[i];
    const int64_t slot = p.slot_mapping[b];
    write_record(p, p.positions[b], c, p.kv + data_offset(p, slot), p.kv + scale_offset(p, slot));
  };

  if (splits == 1) {
#pragma omp parallel
    {
      alignas(64) float c[kDim];
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < p.num_outputs; ++i) {
        const int64_t b = p.boundary[i];
        if (p.slot_mapping[b] < 0) continue;
        pool(p, p.token_to_req[b], p.positions[b], 0, kDim, c);
        write(i, c);
      }
    }
    return;
  }

  // Few outputs: pool (output, dim range) pairs into a buffer, then write the records.
  const int range = kDim / splits;
  std::vector<float> pooled(static_cast<size_t>(p.num_outputs) * kDim);
#pragma omp parallel
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < p.num_outputs * splits; ++task) {
      const int64_t i = task / splits;
      const int d_begin = static_cast<int>(task % splits) * range;
      const int64_t b = p.boundary[i];
      if (p.slot_mapping[b] < 0) continue;
      pool(p, p.token_to_req[b], p.positions[b], d_begin, d_begin + range, &pooled[i * kDim]);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < p.num_outputs; ++i)
      if (p.slot_mapping[p.boundary[i]] >= 0) write(i, &pooled[i * kDim]);
  }
}

}  // namespace latentkv::compress
