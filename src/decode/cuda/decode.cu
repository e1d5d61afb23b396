// decode/cuda/decode.cu: sparse decode's CUDA host side: its parameters mapped onto the shared
// attention kernel's geometry and output addressing, then the launch for the cache's format; and
// the choice between the Hopper attention kernel (decode/sm90) and the portable one, which every
// attention op's launch (attend_launch.cuh) asks.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cuda_common/device_cache.h"
#include "decode/cuda/attend_launch.cuh"
#include "decode/cuda/launch.h"
#include "decode/cuda/source.cuh"
#include "decode/sm90/config.h"
#include "decode/sm90/launch.h"
#include "latentkv/error.h"

namespace latentkv::decode::cuda {
namespace {

KernelChoice initial_choice() {
  const char* env = std::getenv("LKV_DECODE_KERNEL");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return KernelChoice::kAuto;
  if (std::strcmp(env, "portable") == 0) return KernelChoice::kPortable;
  if (std::strcmp(env, "sm90") == 0) return KernelChoice::kSm90;
  if (std::strcmp(env, "compact") == 0) return KernelChoice::kCompact;
  LKV_FAIL(ErrorKind::kValue, "LKV_DECODE_KERNEL must be auto, portable, sm90 or compact, got '", env, "'");
}

std::atomic<KernelChoice>& choice_ref() {
  static std::atomic<KernelChoice> choice{initial_choice()};
  return choice;
}

}  // namespace

void set_kernel_choice(KernelChoice choice) { choice_ref() = choice; }
KernelChoice kernel_choice() { return choice_ref(); }

bool use_sm90(int device) {
  const KernelChoice c = kernel_choice();
  if (c == KernelChoice::kPortable || c == KernelChoice::kCompact) return false;
  const bool sm90 = decode::sm90::usable(device);
  const int cc = cuda_common::compute_capability(device);
  LKV_CHECK(sm90 || c == KernelChoice::kAuto, "the sm90 decode kernel was asked for (LKV_DECODE_KERNEL "
            "or set_kernel_choice) but device ", device, " cannot run it: it needs compute capability "
            "9.0 (the device has ", cc / 10, ".", cc % 10, "), ",
            decode::sm90::Layout<576>::total, " bytes of shared memory per block (the device allows ",
            cuda_common::max_smem_per_block(device), ") and the driver running its sm_90a code (not "
            "the compute_80 PTX, as under CUDA_FORCE_PTX_JIT=1)");
  return sm90;
}

bool use_compact(int device, int portable_smem) {
  const KernelChoice c = kernel_choice();
  if (c == KernelChoice::kCompact) return true;
  return c == KernelChoice::kAuto && cuda_common::max_smem_per_block(device) < portable_smem;
}

const char* kernel_for_device(int device) {
  if (use_sm90(device)) return "sm90";
  return use_compact(device, SmemLayout<576, false>::total) ? "compact" : "portable";
}

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
  g.unsplit_r1 = p.unsplit_b;
  g.partial_out = p.partial_out;
  g.partial_lse = p.partial_lse;
  g.partial_max = nullptr;
  k.o.max_logits = nullptr;
  k.o.sink = p.sink;
  if (p.extra.topk > 0 && p.extra.format == CacheFormat::v41_fp4) launch_sparse_v41_fp4_extra(k, stream);
  else if (p.format == CacheFormat::v32_fp8) launch_sparse<CacheFormat::v32_fp8>(k, stream);
  else if (p.format == CacheFormat::v4_fp8) launch_sparse<CacheFormat::v4_fp8>(k, stream);
  else launch_sparse<CacheFormat::v41_fp8>(k, stream);
}

}  // namespace latentkv::decode::cuda
