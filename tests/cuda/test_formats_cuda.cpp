// Cache formats on the GPU against the CPU backend (the oracle): byte equality of whole caches after
// quantize (records and every untouched byte), equality of dequantized rows and of
// positions_to_slots, for every format, bf16 and f32 latents, i32 and i64 slots with -1 among them,
// page sizes 1, 53 and 64 with padded pages, and pages past 4 GiB; plus the GPU-side validation
// (slot range, duplicates, 16-byte page alignment). Device memory comes from cudaMalloc only.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "formats_reference.h"
#include "latentkv/error.h"
#include "latentkv/formats.h"
#include "test_util.h"

using namespace latentkv;
using lkv_test::HostCache;
using lkv_test::kAllFormats;
using lkv_test::ref_layout;

namespace {

// Skips the test only when the runtime reports that there is no device (none found, or no driver
// at all, as on a build machine); any other failure fails.
#define FORMAT_REQUIRE_GPU()                                                                 \
  do {                                                                                       \
    int count_ = 0;                                                                          \
    const cudaError_t err_ = cudaGetDeviceCount(&count_);                                    \
    if (err_ == cudaErrorNoDevice || err_ == cudaErrorInsufficientDriver ||                  \
        (err_ == cudaSuccess && count_ == 0))                                                \
      GTEST_SKIP() << "no CUDA device: " << cudaGetErrorString(err_);                        \
    ASSERT_EQ(err_, cudaSuccess) << cudaGetErrorString(err_);                                \
  } while (0)

// An owning cudaMalloc buffer of bytes, filled from and read back to host vectors.
class FormatDeviceBytes {
 public:
  explicit FormatDeviceBytes(size_t bytes) : bytes_(std::max<size_t>(bytes, 1)) {
    if (cudaMalloc(&ptr_, bytes_) != cudaSuccess) ptr_ = nullptr;
  }
  template <typename T>
  explicit FormatDeviceBytes(const std::vector<T>& host) : FormatDeviceBytes(host.size() * sizeof(T)) {
    if (ptr_ && !host.empty()) cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~FormatDeviceBytes() { if (ptr_) cudaFree(ptr_); }
  FormatDeviceBytes(const FormatDeviceBytes&) = delete;
  FormatDeviceBytes& operator=(const FormatDeviceBytes&) = delete;

  template <typename T>
  std::vector<T> download(size_t n) const {
    std::vector<T> h(n);
    if (n) cudaMemcpy(h.data(), ptr_, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// n distinct slots of [0, num_slots) in random order, with about one in six replaced by -1.
std::vector<int64_t> random_slots(int64_t n, int64_t num_slots, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int64_t> s(all.begin(), all.begin() + n);
  for (int64_t& v : s)
    if (rng() % 6 == 0) v = -1;
  return s;
}

std::vector<int32_t> to_i32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

struct Case {
  CacheFormat f;
  int64_t page_size;
  int64_t page_stride;
};

// Every format with P = 1, 53 and 64; pages padded to a multiple of 16 bytes, and for the
// page-split formats at P = 64 FlashMLA's 37440-byte pages.
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (CacheFormat f : kAllFormats) {
    for (int64_t P : {1, 53, 64}) {
      int64_t stride = lkv_test::padded_stride(f, P) + 16;  // one extra 16-byte pad per page
      if (ref_layout(f).split && P == 64) stride = 37440;
      cases.push_back({f, P, stride});
    }
  }
  return cases;
}

}  // namespace

TEST(FormatCuda, QuantizeAndDequantizeMatchCpu) {
  FORMAT_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const Case& c : all_cases()) {
    for (bool bf16 : {false, true}) {
      SCOPED_TRACE(std::string(format_info(c.f).name) + " P=" + std::to_string(c.page_size) +
                   (bf16 ? " bf16" : " f32"));
      const auto l = ref_layout(c.f);
      const int64_t pages = 5, num_slots = pages * c.page_size;
      const int64_t n = std::min<int64_t>(num_slots, 96);
      std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, seed++, bf16);
      std::vector<uint16_t> xh = lkv_test::to_bf16(x);
      std::vector<int64_t> slots64 = random_slots(n, num_slots, seed++);
      std::vector<int32_t> slots32 = to_i32(slots64);
      const bool use_i64 = bf16 == (c.page_size % 2 == 0);  // both slot dtypes, both latent dtypes

      // CPU oracle.
      HostCache host(c.f, pages, c.page_size, c.page_stride);
      const TensorView lat_h = bf16 ? TensorView(xh.data(), DType::bf16, {n, l.d_qk})
                                    : TensorView(x.data(), DType::f32, {n, l.d_qk});
      const TensorView slots_h = use_i64 ? TensorView(slots64.data(), DType::i64, {n})
                                         : TensorView(slots32.data(), DType::i32, {n});
      quantize(c.f, lat_h, slots_h, host.view4());

      // GPU, from the same poisoned cache.
      const Device gpu = Device::cuda(0);
      FormatDeviceBytes d_cache(HostCache(c.f, pages, c.page_size, c.page_stride).bytes);
      FormatDeviceBytes d_lat = bf16 ? FormatDeviceBytes(xh) : FormatDeviceBytes(x);
      FormatDeviceBytes d_slots = use_i64 ? FormatDeviceBytes(slots64) : FormatDeviceBytes(slots32);
      const TensorView lat_d(d_lat.get(), bf16 ? DType::bf16 : DType::f32, {n, l.d_qk}, gpu);
      const TensorView slots_d(d_slots.get(), use_i64 ? DType::i64 : DType::i32, {n}, gpu);
      quantize(c.f, lat_d, slots_d, host.view4(d_cache.get(), gpu));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> got = d_cache.download<uint8_t>(host.bytes.size());
      ASSERT_EQ(got.size(), host.bytes.size());
      for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k], host.bytes[k]) << "cache byte " << k;

      // Dequantize every slot once, plus -1s and a repeated slot, through the 2-D view.
      std::vector<int64_t> read(num_slots);
      std::iota(read.begin(), read.end(), 0);
      read.push_back(-1);
      read.push_back(num_slots - 1);
      const int64_t m = static_cast<int64_t>(read.size());
      std::vector<uint16_t> out_h(m * l.d_qk, 0x7777);
      dequantize(c.f, host.view2(), TensorView(read.data(), DType::i64, {m}),
                 TensorView(out_h.data(), DType::bf16, {m, l.d_qk}), c.page_size);
      FormatDeviceBytes d_read(read);
      FormatDeviceBytes d_out(std::vector<uint16_t>(m * l.d_qk, 0x7777));
      dequantize(c.f, host.view2(d_cache.get(), gpu), TensorView(d_read.get(), DType::i64, {m}, gpu),
                 TensorView(d_out.get(), DType::bf16, {m, l.d_qk}, gpu), c.page_size);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_EQ(d_out.download<uint16_t>(out_h.size()), out_h);
    }
  }
}

// A caller's stream orders the slot copy and the kernel after the caller's own work.
TEST(FormatCuda, RunsOnTheGivenStream) {
  FORMAT_REQUIRE_GPU();
  const CacheFormat f = CacheFormat::v4_int8;
  const int64_t P = 64, pages = 2, n = 100;
  std::vector<float> x = lkv_test::random_latents(n, 512, 64, 77);
  std::vector<int64_t> slots = random_slots(n, P * pages, 78);
  HostCache host(f, pages, P, 37440);
  quantize(f, TensorView(x.data(), DType::f32, {n, 512}), TensorView(slots.data(), DType::i64, {n}),
           host.view4());

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Device gpu = Device::cuda(0);
  FormatDeviceBytes d_cache(HostCache(f, pages, P, 37440).bytes);
  FormatDeviceBytes d_lat(x);
  FormatDeviceBytes d_slots(static_cast<size_t>(n) * 8);
  // The slots arrive through the stream, so validation must wait for this copy.
  ASSERT_EQ(cudaMemcpyAsync(d_slots.get(), slots.data(), n * 8, cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  quantize(f, TensorView(d_lat.get(), DType::f32, {n, 512}, gpu),
           TensorView(d_slots.get(), DType::i64, {n}, gpu), host.view4(d_cache.get(), gpu), -1, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(d_cache.download<uint8_t>(host.bytes.size()), host.bytes);
}

TEST(FormatCuda, PositionsToSlotsMatchesCpu) {
  FORMAT_REQUIRE_GPU();
  std::mt19937 rng(5);
  for (int64_t P : {1, 53, 64}) {
    SCOPED_TRACE("P=" + std::to_string(P));
    const int64_t b = 7, max_blocks = 9, n = 300;
    std::vector<int32_t> table(b * max_blocks);
    for (int32_t& t : table) t = static_cast<int32_t>(rng() % 40) - 4;  // some negative entries
    std::vector<int32_t> pos(b * n);
    for (int32_t& p : pos) {
      const uint32_t r = rng() % 10;
      p = r == 0 ? -1 : r == 1 ? static_cast<int32_t>(max_blocks * P + rng() % 5)
                               : static_cast<int32_t>(rng() % (max_blocks * P));
    }
    std::vector<int32_t> want(b * n, 0);
    positions_to_slots(TensorView(table.data(), DType::i32, {b, max_blocks}),
                       TensorView(pos.data(), DType::i32, {b, n}), P,
                       TensorView(want.data(), DType::i32, {b, n}));
    const Device gpu = Device::cuda(0);
    FormatDeviceBytes d_table(table), d_pos(pos), d_slots(std::vector<int32_t>(b * n, 0));
    positions_to_slots(TensorView(d_table.get(), DType::i32, {b, max_blocks}, gpu),
                       TensorView(d_pos.get(), DType::i32, {b, n}, gpu), P,
                       TensorView(d_slots.get(), DType::i32, {b, n}, gpu));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_slots.download<int32_t>(want.size()), want);
    EXPECT_NE(std::count(want.begin(), want.end(), -1), 0);
  }
}

TEST(FormatCuda, BadSlotsAreRejectedBeforeAnyWrite) {
  FORMAT_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    const auto l = ref_layout(f);
    const int64_t P = 4, pages = 2, n = 3;
    HostCache host(f, pages, P, lkv_test::padded_stride(f, P));
    FormatDeviceBytes d_cache(host.bytes);
    FormatDeviceBytes d_lat(lkv_test::random_latents(n, l.d_qk, l.group, 8));
    const TensorView lat(d_lat.get(), DType::f32, {n, l.d_qk}, gpu);

    FormatDeviceBytes out_of_range(std::vector<int64_t>{0, 8, 1});
    EXPECT_TRUE(has(latentkv::testing::error_of([&] {
      quantize(f, lat, TensorView(out_of_range.get(), DType::i64, {n}, gpu), host.view4(d_cache.get(), gpu));
    }), "slot 8 (slots[1])"));
    FormatDeviceBytes dup(std::vector<int32_t>{3, -1, 3});
    EXPECT_TRUE(has(latentkv::testing::error_of([&] {
      quantize(f, lat, TensorView(dup.get(), DType::i32, {n}, gpu), host.view4(d_cache.get(), gpu));
    }), "slot 3 is written twice (slots[0] and slots[2])"));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_cache.download<uint8_t>(host.bytes.size()), host.bytes);
  }
}

TEST(FormatCuda, PagesMustBe16ByteAligned) {
  FORMAT_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const CacheFormat f = CacheFormat::v4_fp8;
  const int64_t P = 53;  // 53 * 584 = 30952 bytes, not a multiple of 16
  FormatDeviceBytes d_cache(static_cast<size_t>(3 * 30976));
  const std::string stride_msg = latentkv::testing::error_of([&] {
    cache_geometry(TensorView(d_cache.get(), DType::u8, {3, P, 1, 584}, gpu), f);
  });
  EXPECT_TRUE(has(stride_msg, "page stride 30952 must be a multiple of 16")) << stride_msg;
  EXPECT_NO_THROW(cache_geometry(TensorView(d_cache.get(), DType::u8, {3, 30976}, gpu), f, P));
  const std::string base_msg = latentkv::testing::error_of([&] {
    cache_geometry(TensorView(static_cast<uint8_t*>(d_cache.get()) + 8, DType::u8, {2, 30976}, gpu), f, P);
  });
  EXPECT_TRUE(has(base_msg, "16-byte aligned")) << base_msg;
}

// Records past 4 GiB: quantize into, and dequantize from, a cache whose pages lie beyond 4.5 GiB
// (the slots shifted by as many pages, i32 and i64); the far pages must end byte for byte as the
// CPU's five-page cache and read back the same rows, and the bytes 4 GiB below them, where an
// offset computed in 32 bits would write, must keep their 0xAB.
TEST(FormatCuda, RecordsPast4GiB) {
  FORMAT_REQUIRE_GPU();
  const size_t arena_bytes = latentkv::testing::kFarOffsetBytes + (size_t{8} << 20);
  const FormatDeviceBytes arena(arena_bytes);
  if (!arena.get()) {
    cudaGetLastError();  // clear the allocation error for the calls that follow
    GTEST_SKIP() << "the device lacks 4.5 GiB of free memory";
  }
  uint8_t* base = static_cast<uint8_t*>(arena.get());
  const Device gpu = Device::cuda(0);
  uint32_t seed = 77;
  for (CacheFormat f : kAllFormats) {
    SCOPED_TRACE(format_info(f).name);
    ASSERT_EQ(cudaMemset(base, 0xAB, arena_bytes), cudaSuccess);
    const auto l = ref_layout(f);
    const int64_t P = 64, pages = 5, stride = lkv_test::padded_stride(f, P), num_slots = pages * P;
    const int64_t far_pages = latentkv::testing::far_rows(stride);
    const size_t at = static_cast<size_t>(far_pages * stride);
    ASSERT_LE(at + pages * stride, arena_bytes);
    const int64_t n = 96;
    std::vector<float> x = lkv_test::random_latents(n, l.d_qk, l.group, seed++, false);
    std::vector<int64_t> slots = random_slots(n, num_slots, seed++);
    HostCache host(f, pages, P, stride);
    quantize(f, TensorView(x.data(), DType::f32, {n, l.d_qk}), TensorView(slots.data(), DType::i64, {n}),
             host.view4());

    std::vector<int64_t> far_slots = slots;
    for (int64_t& s : far_slots)
      if (s >= 0) s += far_pages * P;
    const bool i64 = static_cast<int>(f) % 2 == 0;  // both slot dtypes across the formats
    FormatDeviceBytes d_lat(x);
    FormatDeviceBytes d_slots = i64 ? FormatDeviceBytes(far_slots) : FormatDeviceBytes(to_i32(far_slots));
    const int64_t all_pages = far_pages + pages;
    const TensorView far4(base, DType::u8, {all_pages, P, 1, l.bpt}, {stride, l.bpt, l.bpt, 1}, gpu);
    const TensorView far2(base, DType::u8, {all_pages, stride}, {stride, 1}, gpu);
    quantize(f, TensorView(d_lat.get(), DType::f32, {n, l.d_qk}, gpu),
             TensorView(d_slots.get(), i64 ? DType::i64 : DType::i32, {n}, gpu), far4);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> got(host.bytes.size()), low(host.bytes.size());
    ASSERT_EQ(cudaMemcpy(got.data(), base + at, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(low.data(), base + at - (size_t{1} << 32), low.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, host.bytes) << "the far pages";
    EXPECT_EQ(std::count(low.begin(), low.end(), uint8_t{0xAB}), static_cast<std::ptrdiff_t>(low.size()))
        << "bytes changed where a 32-bit offset would wrap to";

    // Every record read back from the far pages, as the CPU reads the compact cache.
    std::vector<int64_t> read(num_slots);
    std::iota(read.begin(), read.end(), 0);
    std::vector<uint16_t> want(num_slots * l.d_qk);
    dequantize(f, host.view2(), TensorView(read.data(), DType::i64, {num_slots}),
               TensorView(want.data(), DType::bf16, {num_slots, l.d_qk}), P);
    for (int64_t& s : read) s += far_pages * P;
    FormatDeviceBytes d_read(read);
    FormatDeviceBytes d_out(std::vector<uint16_t>(want.size(), 0x7777));
    dequantize(f, far2, TensorView(d_read.get(), DType::i64, {num_slots}, gpu),
               TensorView(d_out.get(), DType::bf16, {num_slots, l.d_qk}, gpu), P);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(d_out.download<uint16_t>(want.size()), want) << "rows read back from the far pages";
  }
}
