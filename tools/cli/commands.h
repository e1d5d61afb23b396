// tools/cli/commands.h: the CLI's subcommands.
#pragma once

#include <cstdint>
#include <vector>

#include "bench_util.h"
#include "latentkv/formats.h"

namespace latentkv::cli {
int cmd_bench_compress(const Args& args);
int cmd_verify(const Args& args);
int cmd_run_compress(const Args& args);
int cmd_bench_decode(const Args& args);
int cmd_demo(const Args& args);
int cmd_bench_prefill(const Args& args);
int cmd_bench_dense(const Args& args);

// Random but finite records of format f for num_pages pages of P tokens (bench_decode.cpp).
std::vector<uint8_t> random_cache(CacheFormat f, int64_t num_pages, int64_t P, uint64_t seed);
}  // namespace latentkv::cli
