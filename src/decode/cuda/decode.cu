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
  set_decode_rows(p, g, k.o);
  g.heads_per_kv = p.h_q;  // MQA: one latent kv head for every query head
  g.head_blocks_per_kv = (p.h_q + kHeadsPerCta - 1) / kHeadsPerCta;
  g.kv_heads = 1;
  g.num_splits = p.num_splits;
  g.keys_per_split = p.keys_per_split;
  g.partial_out = p.partial_out;
  g.partial_lse = p.partial_lse;
  g.partial_max = nullptr;
  k.o.max_logits = nullptr;
  k.o.sink = p.sink;
  if (p.format == CacheFormat::v32_fp8) launch_sparse<CacheFormat::v32_fp8>(k, stream);
  else launch_sparse<CacheFormat::v4_fp8>(k, stream);
}

}  // namespace latentkv::decode::cuda
