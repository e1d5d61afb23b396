// Probe: what a dependent global load costs on a cold SM after an L2 flush, apart from DRAM. The
// compressor's prologue is a chain boundary -> (slot, request, position) -> block table -> state;
// in bench/NOTES.md v37 the first link took ~0.3 us (an L2 hit's time) and the second ~0.7 us
// whether or not its lines had been prefetched into L2 while the first was in flight. A cost that
// a prefetch cannot remove and that a first touch of another allocation pays would be address
// translation (the SM's TLB misses on pages it has not touched); this probe separates the two.
//
// Build and run on the device: nvcc -O3 -arch=sm_90a -o /tmp/tr bench/probes/translation.cu && /tmp/tr
// One thread per CTA (on `ctas` CTAs, one per SM up to 132) walks a chain of 4 dependent 8-byte
// loads (each address depends on the value before it) and stamps %globaltimer after each. Arrays
// hold their own indices, so every link's address is known in advance and yet waits for the last.
// Before each launch a 256 MiB read evicts the L2. Cases:
//   separate:          the 4 links in 4 different 32 MiB allocations (4 pages never touched by
//                      this SM since the flush; DRAM misses);
//   one page:          the 4 links 64 KiB apart inside one 2 MiB region of one allocation (the
//                      same page; DRAM misses);
//   separate, in L2:   as separate, but another kernel read the 4 lines after the flush (L2 hits;
//                      that kernel ran on other SMs, so this SM's TLB has not seen the pages);
//   one page, in L2:   as one page, lines in L2 the same way;
//   warm:              the separate chain run twice in one thread, the second walk timed (L2 hits
//                      on pages this SM has just translated).
// Medians over CTAs and 20 launches per case, per link, in ns.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      return 1;                                                                       \
    }                                                                                 \
  } while (0)

constexpr int kLinks = 4;

struct Chain {
  const int64_t* base[kLinks];  // link i reads base[i][at[i]] (+ 0 x the previous value)
  int64_t at[kLinks];
};

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// The timer read predicated on a test of v, so that it cannot issue before v's load has returned
// (an unpredicated read may issue while the load is still in flight).
__device__ __forceinline__ unsigned long long now_after(int64_t v) {
  unsigned long long t = 0;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.s64 p, %1, -12345;\n @p mov.u64 %0, %%globaltimer;\n}\n"
      : "+l"(t)
      : "l"(v)
      : "memory");
  return t;
}

// Each CTA's thread 0 walks the chain (CTA c reads at[i] + 16 c, its own line per link); stamps
// [ctas][kLinks + 1]. walks = 2: the first walk warms, the second is stamped.
__global__ void walk(Chain ch, int walks, unsigned long long* stamps) {
  if (threadIdx.x != 0) return;
  const int64_t own = 16 * static_cast<int64_t>(blockIdx.x);  // 128 bytes per CTA
  unsigned long long t[kLinks + 1];
  for (int w = 0; w < walks; ++w) {
    int64_t v = 0;
    t[0] = now();
#pragma unroll
    for (int i = 0; i < kLinks; ++i) {
      // v equals the index just read; subtracting it and adding the next index keeps the address
      // dependent on the load without changing it.
      const int64_t prev = i == 0 ? 0 : ch.at[i - 1] + own;
      v = *(volatile const int64_t*)(ch.base[i] + ch.at[i] + own + (v - prev));
      t[i + 1] = now_after(v);
    }
    if (v < 0) stamps[0] = 0;  // never: keeps the walk
  }
  for (int i = 0; i <= kLinks; ++i) stamps[blockIdx.x * (kLinks + 1) + i] = t[i];
}

// Reads each CTA's line of every link (L2 fill from CTAs placed elsewhere: launched with one more
// CTA than the walk, so that CTA c + 1 fills CTA c's lines).
__global__ void fill(Chain ch, int ctas, int64_t* sink) {
  if (threadIdx.x != 0 || blockIdx.x == 0) return;
  const int64_t own = 16 * static_cast<int64_t>((blockIdx.x - 1) % ctas);
  int64_t acc = 0;
  for (int i = 0; i < kLinks; ++i) acc += *(volatile const int64_t*)(ch.base[i] + ch.at[i] + own);
  if (acc == -1) *sink = acc;
}

__global__ void flush(const int4* buf, size_t n, int* sink) {
  int acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc ^= buf[i].x;
  if (acc == 0x7fffffff) *sink = acc;
}

__global__ void iota(int64_t* a, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a[i] = i;
}

int main() {
  const size_t kFlush = size_t{256} << 20;
  const int64_t kArray = int64_t{32} << 20;  // bytes per allocation
  int4* fbuf;
  int* isink;
  int64_t* lsink;
  CHECK(cudaMalloc(&fbuf, kFlush));
  CHECK(cudaMemset(fbuf, 1, kFlush));
  CHECK(cudaMalloc(&isink, 4));
  CHECK(cudaMalloc(&lsink, 8));
  int64_t* arr[kLinks];
  for (auto& a : arr) {
    CHECK(cudaMalloc(&a, kArray));
    iota<<<264, 256>>>(a, kArray / 8);
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  Chain separate{}, page{};
  for (int i = 0; i < kLinks; ++i) {
    separate.base[i] = arr[i];
    separate.at[i] = (int64_t{1} << 20) + 8192 * i;  // 8 MiB into each allocation
    page.base[i] = arr[0];
    page.at[i] = (int64_t{3} << 20) / 8 + 8192 * i;  // 64 KiB apart from 24 MiB in
  }
  struct Case {
    const char* name;
    const Chain* chain;
    bool fill;
    int walks;
  };
  const Case cases[] = {{"separate", &separate, false, 1},
                        {"one page", &page, false, 1},
                        {"separate, in L2", &separate, true, 1},
                        {"one page, in L2", &page, true, 1},
                        {"warm", &separate, false, 2}};
  unsigned long long* d_st;
  CHECK(cudaMalloc(&d_st, sizeof(unsigned long long) * 1024 * (kLinks + 1)));
  for (int ctas : {1, sms}) {
    std::printf("%d CTA%s: median ns per link (link 1 .. %d), then the chain\n", ctas, ctas > 1 ? "s" : "", kLinks);
    for (const Case& c : cases) {
      std::vector<std::vector<double>> per(kLinks + 1);
      for (int rep = 0; rep < 20; ++rep) {
        flush<<<528, 256>>>(fbuf, kFlush / sizeof(int4), isink);
        if (c.fill) fill<<<ctas + 1, 32>>>(*c.chain, ctas, lsink);
        walk<<<ctas, 32>>>(*c.chain, c.walks, d_st);
        CHECK(cudaDeviceSynchronize());
        std::vector<unsigned long long> h(static_cast<size_t>(ctas) * (kLinks + 1));
        CHECK(cudaMemcpy(h.data(), d_st, h.size() * sizeof(h[0]), cudaMemcpyDeviceToHost));
        for (int b = 0; b < ctas; ++b) {
          const unsigned long long* s = &h[static_cast<size_t>(b) * (kLinks + 1)];
          for (int i = 0; i < kLinks; ++i) per[i].push_back(static_cast<double>(s[i + 1] - s[i]));
          per[kLinks].push_back(static_cast<double>(s[kLinks] - s[0]));
        }
      }
      std::printf("  %-18s", c.name);
      for (auto& v : per) {
        std::sort(v.begin(), v.end());
        std::printf(" %7.0f", v[v.size() / 2]);
      }
      std::printf("\n");
    }
  }
  return 0;
}
