#pragma once
// Helpers for op tests: seeded random data, central finite differences in double,
// element-wise closeness with atol + rtol*|ref|, f32 tensors on CPU devices, and
// the message of an op's refusal.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::test {

// Uniform in [lo, hi), from a fixed seed.
std::vector<double> random_vector(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0);

template <typename To, typename From>
std::vector<To> cast_vector(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// g[i] = (f(x + h e_i) - f(x - h e_i)) / 2h for every i.
std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                 std::vector<double> x, double h = 1e-5);

// Every |actual - expected| <= atol + rtol * |expected|; on failure `why` names the
// worst element.
bool all_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
               double atol, std::string* why = nullptr);

double max_abs(const std::vector<double>& v);

// sum_i a[i] * b[i], the scalar the finite-difference tests differentiate.
double dot(const std::vector<double>& a, const std::vector<double>& b);

// f32 tensors on a CPU device through a stream.
Tensor f32_tensor(Stream& stream, const std::vector<double>& values, Shape shape);
std::vector<double> f32_values(Stream& stream, const Tensor& t);

// The message of the fanout::Error that fn throws, or "" if it throws none.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fanout::test
