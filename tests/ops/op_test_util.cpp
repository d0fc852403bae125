#include "tests/ops/op_test_util.h"

#include <cmath>
#include <random>
#include <sstream>

namespace fanout::test {

std::vector<double> random_vector(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                 std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + h;
    double fp = f(x);
    x[i] = saved - h;
    double fm = f(x);
    x[i] = saved;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

bool all_close(const std::vector<double>& actual, const std::vector<double>& expected, double rtol,
               double atol, std::string* why) {
  if (actual.size() != expected.size()) {
    if (why)
      *why = "size " + std::to_string(actual.size()) + " vs " + std::to_string(expected.size());
    return false;
  }
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    double ratio = std::abs(actual[i] - expected[i]) / (atol + rtol * std::abs(expected[i]));
    if (!(ratio <= worst)) worst = ratio, worst_i = i;  // NaN counts as worst
  }
  if (worst <= 1.0) return true;
  if (why) {
    std::ostringstream os;
    os.precision(10);
    os << "element " << worst_i << ": " << actual[worst_i] << " vs " << expected[worst_i];
    *why = os.str();
  }
  return false;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

Tensor f32_tensor(Stream& stream, const std::vector<double>& values, Shape shape) {
  return tensor_from_vector(stream, cast_vector<float>(values), std::move(shape), DType::f32,
                            stream.device());
}

std::vector<double> f32_values(Stream& stream, const Tensor& t) {
  return cast_vector<double>(tensor_to_vector<float>(stream, t));
}

}  // namespace fanout::test
