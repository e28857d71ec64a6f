// Helpers shared by the pybind11 registration files of every backend and op.
#pragma once

#include <pybind11/pybind11.h>

#include <cstring>
#include <string>

namespace dualops {

// A packed C struct (params or tiling header) from Python bytes; the size must match exactly,
// else the module was built from another schema than the package's.
template <typename T>
T struct_from_bytes(const pybind11::bytes& b, const char* what) {
  const std::string s = b;
  if (s.size() != sizeof(T)) {
    throw pybind11::value_error(std::string(what) + " must be " + std::to_string(sizeof(T)) +
                                " bytes (the packed C struct), got " + std::to_string(s.size()) +
                                "; rebuild dualops._C after a schema change");
  }
  T out;
  std::memcpy(&out, s.data(), sizeof(T));
  return out;
}

// The leading part of a packed struct (plans: a fixed header followed by arrays).
template <typename T>
T struct_prefix_from_bytes(const pybind11::bytes& b, const char* what) {
  const std::string s = b;
  if (s.size() < sizeof(T)) {
    throw pybind11::value_error(std::string(what) + " must hold at least " + std::to_string(sizeof(T)) +
                                " bytes (the packed header), got " + std::to_string(s.size()));
  }
  T out;
  std::memcpy(&out, s.data(), sizeof(T));
  return out;
}

}  // namespace dualops
