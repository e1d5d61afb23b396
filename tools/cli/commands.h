// tools/cli/commands.h: the CLI's subcommands.
#pragma once

#include "bench_util.h"

namespace latentkv::cli {
int cmd_bench_compress(const Args& args);
int cmd_verify(const Args& args);
int cmd_run_compress(const Args& args);
int cmd_bench_decode(const Args& args);
int cmd_demo(const Args& args);
}  // namespace latentkv::cli
