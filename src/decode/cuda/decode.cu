// decode/cuda/decode.cu: sparse decode's CUDA host side: its parameters mapped onto the shared
// attention kernel's geometry and output addressing, then the launch for the cache's format.
#include "decode/cuda/launch.h"
#include "decode/cuda/source.cuh"

namespace latentkv::decode::cuda {

void sparse_decode(const Params& p, Stream stream) {
  KernelParams<SparseArgs> k{};
  k.src.main = p.main;
  k.src.extra = p.extra;
  Geometry& g = k.g;
  g.q = p.q;
  g.stride_q_r1 = p.stride_q_b;
  g.stride_q_r2 = p.stride_q_s;
  g.stride_q_h = p.stride_q_h;
  g.n1 = p.b;
  g.n2 = p.s_q;
  g.h_q = p.h_q;
  g.heads_per_kv = p.h_q;  // MQA: one latent kv head for every query head
  g.head_blocks_per_kv = (p.h_q + kHeadsPerCta - 1) / kHeadsPerCta;
  g.kv_heads = 1;
  g.scale = p.scale;
  g.num_splits = p.num_splits;
  g.keys_per_split = p.keys_per_split;
  g.partial_out = p.partial_out;
  g.partial_lse = p.partial_lse;
  g.partial_max = nullptr;
  OutRef& o = k.o;
  o.out = p.out;
  o.stride_out_r1 = p.stride_out_b;
  o.stride_out_r2 = p.stride_out_s;
  o.stride_out_h = p.stride_out_h;
  o.lse = p.lse;  // [b, h_q, s_q]
  o.stride_lse_r1 = p.stride_lse_b;
  o.stride_lse_r2 = 1;
  o.stride_lse_h = p.stride_lse_h;
  o.max_logits = nullptr;
  o.sink = p.sink;
  if (p.format == CacheFormat::v32_fp8) launch_sparse<CacheFormat::v32_fp8>(k, stream);
  else launch_sparse<CacheFormat::v4_fp8>(k, stream);
}

}  // namespace latentkv::decode::cuda
