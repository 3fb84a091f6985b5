#include <gtest/gtest.h>

#include "gradcheck.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> fn;
  double lo, hi;
};

TEST(ElementwiseOps, UnaryGradients) {
  std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, -2, 2},
      {"abs", [](const Tensor& x) { return abs(x); }, 0.1, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, 0.2, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 3},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.2, 3},
      {"square", [](const Tensor& x) { return square(x); }, -2, 2},
      {"pow3", [](const Tensor& x) { return pow(x, 3.0); }, -2, 2},
      {"pow1.5", [](const Tensor& x) { return pow(x, 1.5); }, 0.2, 2},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -3, 3},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -4, 4},
      {"silu", [](const Tensor& x) { return silu(x); }, -4, 4},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, -4, 4},
      {"relu", [](const Tensor& x) { return relu(x); }, 0.1, 2},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 0.7); }, -2, 2},
      {"add_scalar", [](const Tensor& x) { return x + 3.0; }, -2, 2},
      {"mul_scalar", [](const Tensor& x) { return x * -1.5; }, -2, 2},
  };
  for (auto& c : cases) {
    SCOPED_TRACE(c.name);
    for (bool transposed : {false, true}) {
      Tensor x = leaf({3, 5}, 7, transposed, c.lo, c.hi);
      expect_gradcheck([&](const std::vector<Tensor>& in) { return c.fn(in[0]); }, {x});
    }
  }
}

TEST(ElementwiseOps, BinaryGradientsWithBroadcasting) {
  using B = std::function<Tensor(const Tensor&, const Tensor&)>;
  std::vector<std::pair<const char*, B>> ops = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
  std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 3}, {4, 3}}, {{4, 3}, {3}}, {{4, 1}, {1, 3}}, {{2, 4, 3}, {4, 1}}, {{3}, {}}};
  for (auto& [name, op] : ops) {
    for (auto& [sa, sb] : shapes) {
      SCOPED_TRACE(std::string(name) + " " + shape_str(sa) + " " + shape_str(sb));
      Tensor a = leaf(sa, 1, sa.size() >= 2, 0.5, 2);
      Tensor b = leaf(sb, 2, false, 0.5, 2);
      expect_gradcheck([&](const std::vector<Tensor>& in) { return op(in[0], in[1]); }, {a, b});
    }
  }
}

TEST(ElementwiseOps, WhereAndCast) {
  Tensor a = leaf({3, 4}, 3), b = leaf({4}, 4);
  Tensor cond = from_vector({1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0}, {3, 4}, DType::boolean);
  expect_gradcheck([&](const std::vector<Tensor>& in) { return where(cond, in[0], in[1]); }, {a, b});
  Tensor x = leaf({5}, 5);
  expect_gradcheck([](const std::vector<Tensor>& in) { return cast(cast(in[0], DType::f32), DType::f64) * 2.0; },
                   {x}, 1e-3, 1e-4, 1e-3);
}

TEST(ElementwiseOps, ShapeMismatchNamesBothShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  try {
    add(a, b);
    FAIL() << "no throw";
  } catch (const ValueError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("[add]"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
    EXPECT_NE(m.find("[4]"), std::string::npos) << m;
  }
  EXPECT_THROW(add(zeros({2}, DType::i64), zeros({2})), ValueError);
}

TEST(ElementwiseOps, MixedDtypePromotion) {
  Tensor a = full({4}, 1.5, DType::bf16), b = full({4}, 0.25, DType::f32);
  Tensor c = a + b;
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_EQ(c.to_vector()[3], 1.75);
  EXPECT_EQ((a * 2.0).dtype(), DType::bf16);
}

}  // namespace
}  // namespace hp
