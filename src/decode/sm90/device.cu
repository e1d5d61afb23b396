// Whether a device runs the Hopper attention kernel (see launch.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_common/cuda_check.h"
#include "cuda_common/device_cache.h"
#include "decode/sm90/config.h"
#include "decode/sm90/launch.h"

namespace latentkv::decode::sm90 {
namespace {

std::atomic<bool>& pairs_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_SM90_PAIR");
    return e && std::strcmp(e, "1") == 0;
  }()};
  return flag;
}

std::atomic<bool>& narrow_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_SM90_NARROW");
    return !(e && std::strcmp(e, "0") == 0);
  }()};
  return flag;
}

std::atomic<bool>& narrow_wide_flag() {
  static std::atomic<bool> flag{[] {
    const char* e = std::getenv("LKV_SM90_NARROW32");
    if (e && std::strcmp(e, "1") == 0) return true;
    if (e && std::strcmp(e, "0") == 0) return false;
    return kNarrowWideRowsByDefault;
  }()};
  return flag;
}

std::atomic<NarrowForm>& narrow_form_flag() {
  static std::atomic<NarrowForm> flag{[] {
    const char* e = std::getenv("LKV_SM90_NARROW_WS");
    if (e && std::strcmp(e, "1") == 0) return NarrowForm::kWarpSpecialised;
    if (e && std::strcmp(e, "0") == 0) return NarrowForm::kTwoCtas;
    return NarrowForm::kAuto;
  }()};
  return flag;
}

}  // namespace

bool warp_specialised() {
  static const bool ws = [] {
    const char* e = std::getenv("LKV_SM90_WS");
    return e && std::strcmp(e, "1") == 0;
  }();
  return ws;
}

bool cta_pairs() { return pairs_flag().load(std::memory_order_relaxed); }
void set_cta_pairs(bool on) { pairs_flag().store(on, std::memory_order_relaxed); }

bool narrow_rows() { return narrow_flag().load(std::memory_order_relaxed); }
void set_narrow_rows(bool on) { narrow_flag().store(on, std::memory_order_relaxed); }

bool narrow_wide_rows() { return narrow_wide_flag().load(std::memory_order_relaxed); }
void set_narrow_wide_rows(bool on) { narrow_wide_flag().store(on, std::memory_order_relaxed); }

NarrowForm narrow_form() { return narrow_form_flag().load(std::memory_order_relaxed); }
void set_narrow_form(NarrowForm form) { narrow_form_flag().store(form, std::memory_order_relaxed); }
bool narrow_ws(bool dense_pages) { return narrow_ws_under(narrow_form(), dense_pages); }

std::string switch_notes() {
  std::string n;
  if (warp_specialised()) n += " (warp-specialised variant, LKV_SM90_WS=1)";
  if (cta_pairs()) n += " (CTA pairs where the keys are dequantized, LKV_SM90_PAIR=1)";
  if (!narrow_rows()) n += " (no narrow kernel, LKV_SM90_NARROW=0)";
  if (narrow_form() == NarrowForm::kWarpSpecialised)
    n += " (narrow kernel warp-specialised for every launch, LKV_SM90_NARROW_WS=1)";
  if (narrow_form() == NarrowForm::kTwoCtas) n += " (narrow kernel in two CTAs for every launch, LKV_SM90_NARROW_WS=0)";
  if (narrow_wide_rows() != kNarrowWideRowsByDefault)
    n += narrow_wide_rows() ? " (32-row narrow kernel for 17-32-row CTAs, LKV_SM90_NARROW32=1)"
                            : " (no 32-row narrow kernel, LKV_SM90_NARROW32=0)";
  return n;
}

bool usable(int device) {
  // Compute capability 9.0 exactly (sm_90a code runs nowhere else), room for the shared memory, and
  // the sm_90a code itself in use: the kernel body compiled for other targets is a trap.
  return cuda_common::compute_capability(device) == 90 &&
         cuda_common::max_smem_per_block(device) >= Layout<576>::total && cuda_common::ptx_version(device) >= 90;
}

}  // namespace latentkv::decode::sm90
