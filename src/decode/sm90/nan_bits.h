// decode/sm90/nan_bits.h: a NaN check of e4m3 bytes in two instructions per 32-bit word, for the
// Hopper kernel's per-token fast-path test (records.cuh, store_dequantized); host and device, so the
// CPU tests check it over every byte value and position (tests/cpu/test_decode.cpp).
#pragma once

#include <cstdint>

#include "latentkv/numerics.h"  // LKV_HD

namespace latentkv::decode::sm90 {

// Bits in which bit 7 of some byte is set iff one of the bytes of w0..w3 is an e4m3 NaN (0x7f or
// 0xff). Adding 1 to a byte flips its bit 7 exactly when its low 7 bits are all ones; a carry out of
// a byte comes only from 0xff (itself NaN) and may flip a neighbour's bit 7, which can only add a
// flag where one is already due. An add and a three-input xor-or per word, against three
// instructions for ((w & 0x7f7f7f7f) + 0x01010101) & 0x80808080; the caller ORs the results over a
// token's chunks and tests (bits & 0x80808080) once.
LKV_HD uint32_t nan_bits_words(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  return ((w0 + 0x01010101u) ^ w0) | ((w1 + 0x01010101u) ^ w1) | ((w2 + 0x01010101u) ^ w2) |
         ((w3 + 0x01010101u) ^ w3);
}

}  // namespace latentkv::decode::sm90
