// tests/test_util.h: small helpers shared by the C++ test suites.
#pragma once

#include <functional>
#include <string>

#include "latentkv/error.h"

namespace latentkv::testing {

// The message of the latentkv::Error that f throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace latentkv::testing
