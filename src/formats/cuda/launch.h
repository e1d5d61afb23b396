// formats/cuda/launch.h: the CUDA backend of the format ops, declared without any CUDA header.
//
// formats.cpp validates the views and fills the params; these launch one kernel on `stream`
// (nullptr: the legacy default stream) on CUDA device `device` and return without synchronising,
// except copy_to_host, which does synchronise (the dispatch layer's slot validation needs it).
#pragma once

#include <cstddef>

#include "formats/params.h"
#include "latentkv/tensor.h"

namespace latentkv::formats::cuda {

void quantize(const QuantizeParams& p, int device, Stream stream);
void dequantize(const DequantizeParams& p, int device, Stream stream);
void positions_to_slots(const PositionsToSlotsParams& p, int device, Stream stream);

// Copies `bytes` from device memory to host memory in stream order, then waits for the stream.
void copy_to_host(void* dst, const void* src, size_t bytes, int device, Stream stream);

}  // namespace latentkv::formats::cuda
