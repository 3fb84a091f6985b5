// gather, scatter_add, index_select, index_add, embedding, cat, split and stack: gradients, values
// against simple loops, index errors, and thread-count independence of embedding's backward.
#include <gtest/gtest.h>

#include <cstring>

#include "gradcheck.h"
#include "hp/core/thread_pool.h"

namespace hp {
namespace {

using testing::expect_gradcheck;
using testing::leaf;

using V = std::vector<Tensor>;

Tensor idx64(const std::vector<int64_t>& v, const Shape& s) {
  return from_data<int64_t>(v, s);
}

// The exception message of fn, which must throw IndexError.
template <class Fn>
std::string index_error(Fn fn) {
  try {
    fn();
  } catch (const IndexError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IndexError";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Gather, ValuesGradientsAndErrors) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor i = idx64({2, 0, 1, 1}, {2, 2});
  EXPECT_EQ(gather(a, 1, i).to_vector(), (std::vector<double>{3, 1, 5, 5}));
  EXPECT_EQ(gather(a, 0, idx64({1, 0, 1}, {1, 3})).to_vector(), (std::vector<double>{4, 2, 6}));
  for (bool tr : {false, true}) {
    Tensor x = leaf({3, 4}, 41, tr);
    Tensor gi = idx64({3, 3, 0, 1, 2, 2, 0, 0, 1}, {3, 3});  // repeats: gradients accumulate
    expect_gradcheck([&](const V& in) { return gather(in[0], 1, gi); }, {x});
    expect_gradcheck(
        [&](const V& in) {
          return gather(in[0], 0, idx64({2, 0, 1, 2}, {1, 4}));
        },
        {x});
  }
  auto msg = index_error([&] { gather(a, 1, idx64({0, 3}, {1, 2})); });
  EXPECT_TRUE(contains(msg, "index 3") && contains(msg, "[0, 3)")) << msg;
  msg = index_error([&] { gather(a, 1, idx64({-1}, {1, 1})); });
  EXPECT_TRUE(contains(msg, "index -1")) << msg;
  EXPECT_THROW(gather(a, 1, idx64({0, 0, 0}, {3, 1})), ValueError);  // larger outside dim
  EXPECT_THROW(gather(a, 1, from_vector({0}, {1, 1})), ValueError);  // float index
}

TEST(ScatterAdd, ValuesGradientsAndErrors) {
  Tensor a = zeros({2, 3});
  Tensor src = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor i = idx64({0, 0, 2, 1, 1, 1}, {2, 3});
  EXPECT_EQ(scatter_add(a, 1, i, src).to_vector(), (std::vector<double>{3, 0, 3, 0, 15, 0}));
  EXPECT_EQ(a.to_vector(), std::vector<double>(6, 0.0));  // out of place
  for (bool tr : {false, true}) {
    Tensor x = leaf({3, 4}, 42, tr), s = leaf({3, 4}, 43, tr);
    Tensor si = idx64({1, 1, 0, 3, 2, 0}, {3, 2});  // smaller than src: the rest gets no gradient
    expect_gradcheck([&](const V& in) { return scatter_add(in[0], 1, si, in[1]); }, {x, s});
    expect_gradcheck(
        [&](const V& in) {
          return scatter_add(in[0], 0, idx64({2, 2, 0, 1}, {1, 4}), in[1]);
        },
        {x, s});
  }
  auto msg = index_error([&] { scatter_add(a, 1, idx64({5}, {1, 1}), src); });
  EXPECT_TRUE(contains(msg, "index 5") && contains(msg, "[0, 3)")) << msg;
  EXPECT_THROW(scatter_add(a, 0, idx64({-2}, {1, 1}), src), IndexError);
  EXPECT_THROW(scatter_add(a, 1, i, src.to(DType::f64)), ValueError);
}

TEST(IndexSelectAdd, ValuesGradientsAndErrors) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(index_select(a, 0, idx64({2, 0, 2}, {3})).to_vector(),
            (std::vector<double>{5, 6, 1, 2, 5, 6}));
  EXPECT_EQ(index_select(a, 1, from_data<int32_t>({1}, {1})).to_vector(),
            (std::vector<double>{2, 4, 6}));
  Tensor added = index_add(zeros({3, 2}), 0, idx64({1, 1, 0}, {3}), a);
  EXPECT_EQ(added.to_vector(), (std::vector<double>{5, 6, 4, 6, 0, 0}));
  for (bool tr : {false, true}) {
    Tensor x = leaf({4, 3}, 44, tr), s = leaf({4, 2}, 45, tr);
    Tensor ii = idx64({2, 2, 0, 3, 2}, {5});
    expect_gradcheck([&](const V& in) { return index_select(in[0], 0, ii); }, {x});
    expect_gradcheck(
        [&](const V& in) {
          return index_select(in[0], 1, idx64({2, 0, 2}, {3}));
        },
        {x});
    expect_gradcheck(
        [&](const V& in) {
          return index_add(in[0], 1, idx64({2, 2}, {2}), in[1]);
        },
        {x, s});
  }
  auto msg = index_error([&] { index_select(a, 0, idx64({0, 3}, {2})); });
  EXPECT_TRUE(contains(msg, "index 3") && contains(msg, "[0, 3)")) << msg;
  EXPECT_THROW(index_select(a, 1, idx64({-1}, {1})), IndexError);
  EXPECT_THROW(index_add(a, 0, idx64({3}, {1}), zeros({1, 2})), IndexError);
  EXPECT_THROW(index_add(a, 0, idx64({0}, {1}), zeros({2, 2})), ValueError);
  EXPECT_THROW(index_select(a, 0, idx64({0}, {1, 1})), ValueError);
}

TEST(Embedding, ValuesGradientsAndErrors) {
  Tensor w = from_vector({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor ids = idx64({2, 0, 2, 1}, {2, 2});
  Tensor y = embedding(w, ids);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
  Tensor wl = leaf({5, 3}, 46);
  expect_gradcheck(
      [&](const V& in) {
        return embedding(in[0], idx64({4, 4, 0, 2, 4, 1}, {3, 2}));
      },
      {wl});
  // Non-contiguous ids and i32 ids.
  Tensor idt = idx64({0, 1, 2, 3, 4, 0}, {2, 3}).as_strided({3, 2}, {1, 3}, 0);
  expect_gradcheck([&](const V& in) { return embedding(in[0], idt); }, {wl});
  expect_gradcheck(
      [&](const V& in) {
        return embedding(in[0], from_data<int32_t>({3, 3}, {2}));
      },
      {wl});
  auto msg = index_error([&] { embedding(w, idx64({0, 3}, {2})); });
  EXPECT_TRUE(contains(msg, "index 3") && contains(msg, "[0, 3)") && contains(msg, "embedding"))
      << msg;
  EXPECT_THROW(embedding(w, idx64({-1}, {1})), IndexError);
  EXPECT_THROW(embedding(w, from_vector({0}, {1})), ValueError);
  // bf16 weights: gradients summed in f32, rounded once.
  Tensor wb = ones({2, 4}, DType::bf16);
  wb.requires_grad_();
  std::vector<int64_t> many(300, 1);
  sum(embedding(wb, idx64(many, {300}))).backward();
  EXPECT_EQ(wb.grad().at({1, 0}), 300.0);  // bf16 running sums would stall at 256
  EXPECT_EQ(wb.grad().at({0, 0}), 0.0);
}

TEST(Determinism, EmbeddingBackwardIndependentOfThreads) {
  manual_seed(8);
  Tensor w = randn({1000, 96});
  std::vector<int64_t> idv;
  for (int64_t i = 0; i < 8192; ++i)
    idv.push_back((i * i * 7 + 3) % 1000 % (i % 5 == 0 ? 10 : 1000));
  Tensor ids = idx64(idv, {64, 128});
  Tensor g = randn({64, 128, 96});
  auto run = [&] {
    Tensor wl = w.clone();
    wl.requires_grad_();
    embedding(wl, ids).backward(g);
    return wl.grad();
  };
  const int prev = num_threads();
  set_num_threads(1);
  Tensor one = run();
  set_num_threads(2);
  Tensor two = run();
  set_num_threads(prev);
  ASSERT_EQ(one.nbytes(), two.nbytes());
  EXPECT_EQ(std::memcmp(one.raw_data(), two.raw_data(), one.nbytes()), 0);
  // And equal to a serial double reference.
  std::vector<double> ref(1000 * 96, 0.0);
  const auto gv = g.to_vector();
  for (size_t t = 0; t < idv.size(); ++t)
    for (int64_t j = 0; j < 96; ++j) ref[idv[t] * 96 + j] += gv[t * 96 + j];
  const auto ov = one.to_vector();
  for (size_t k = 0; k < ref.size(); ++k) ASSERT_NEAR(ov[k], ref[k], 1e-4) << k;
}

TEST(Join, CatSplitStack) {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2}), b = from_vector({5, 6}, {2, 1});
  EXPECT_EQ(cat({a, b}, 1).to_vector(), (std::vector<double>{1, 2, 5, 3, 4, 6}));
  EXPECT_EQ(cat({a, transpose(b, 0, 1)}, 0).to_vector(), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_THROW(cat({a, b}, 0), ValueError);
  EXPECT_THROW(cat({a, a.to(DType::f64)}, 0), ValueError);
  EXPECT_THROW(cat({}, 0), ValueError);
  auto parts = split(from_vector({1, 2, 3, 4, 5}, {5}), {2, 0, 3}, 0);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].to_vector(), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(parts[1].numel(), 0);
  EXPECT_THROW(split(a, {1, 2}, 0), ValueError);
  Tensor s = stack({a, a}, 1);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(s.to_vector(), (std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4}));
  EXPECT_THROW(stack({a, b}, 0), ValueError);
  for (bool tr : {false, true}) {
    Tensor x = leaf({3, 4}, 47, tr), y = leaf({3, 2}, 48, tr), z = leaf({3, 4}, 49);
    expect_gradcheck([](const V& in) { return cat({in[0], in[1], in[0]}, 1); }, {x, y});
    expect_gradcheck([](const V& in) { return stack({in[0], in[1]}, 2); }, {x, z});
    expect_gradcheck([](const V& in) { return stack({in[0], in[1]}, 0); }, {x, z});
    // Pieces used unevenly (one unused): its gradient is zeros.
    expect_gradcheck(
        [](const V& in) {
          auto p = split(in[0], {1, 2, 1}, 1);
          return add(mul(p[0], 3.0), sum(p[1], {1}, true));
        },
        {x});
  }
}

}  // namespace
}  // namespace hp
