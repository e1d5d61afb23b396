// formats/cpu/formats_cpu.h: the CPU backend of the format ops (the oracle the GPU is tested against).
//
// Inputs are validated by formats.cpp before these run; they still never follow a slot outside
// [0, num_slots) (such a token is skipped, as on the GPU).
#pragma once

#include "formats/params.h"

namespace latentkv::formats::cpu {

void quantize(const QuantizeParams& p);
void dequantize(const DequantizeParams& p);
void positions_to_slots(const PositionsToSlotsParams& p);

}  // namespace latentkv::formats::cpu
