// tests/cuda/switches.h: restores one of the CUDA kernels' process-wide switches (a getter and a
// setter, e.g. decode::cuda::roles_allowed / set_roles_allowed) when a test ends, so that a test
// that flips it leaves the value it found for the tests after it.
#pragma once

namespace latentkv::testing {

template <typename T>
class RestoreSwitch {
 public:
  RestoreSwitch(T (*get)(), void (*set)(T)) : set_(set), was_(get()) {}
  ~RestoreSwitch() { set_(was_); }
  RestoreSwitch(const RestoreSwitch&) = delete;
  RestoreSwitch& operator=(const RestoreSwitch&) = delete;

 private:
  void (*set_)(T);
  T was_;
};

}  // namespace latentkv::testing
