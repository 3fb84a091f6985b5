// Outputs at or above ew_stream_bytes() are written with non-temporal stores (EwTable::stream_copy):
// the same bits as plain stores, for f32 and bf16, contiguous and broadcast operands, outputs that
// start off a 32-byte boundary, rows split between threads, and in place.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "hp/core/tensor.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/elementwise.h"
#include "hp/kernels/cpu/ew_table.h"
#include "isa_test.h"

namespace hp::kernels {
namespace {

class EwStream : public test::IsaTest {
 protected:
  void TearDown() override {
    set_ew_stream_bytes(saved_);
    set_num_threads(threads_);
    IsaTest::TearDown();
  }
  const int64_t saved_ = ew_stream_bytes();
  const int threads_ = num_threads();
};
HP_INSTANTIATE_ISA_TESTS(EwStream);

std::vector<char> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<char> out(c.nbytes());
  std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

TEST_P(EwStream, StreamedOutputsEqualPlainStores) {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> av(3 * 40001), bv(40001);
  for (auto& v : av) v = d(rng);
  for (auto& v : bv) v = d(rng);
  for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor a = from_data(av, {3, 40001}).to(dt), b = from_data(bv, {40001}).to(dt);
    // One element in: the output rows start off any 32-byte boundary.
    const Tensor a_off = a.as_strided({3 * 40001 - 1}, {1}, 1);
    for (EwOp op : {EwOp::silu, EwOp::gelu, EwOp::add, EwOp::mul}) {
      const bool binary = ew_arity(op) == 2;
      std::vector<std::vector<char>> res;
      for (int64_t threshold : {int64_t(1) << 62, int64_t(0)}) {
        set_ew_stream_bytes(threshold);
        for (int threads : {1, 2}) {
          set_num_threads(threads);
          res.push_back(bytes_of(binary ? elementwise(op, a, b, dt) : elementwise(op, a)));
          res.push_back(bytes_of(elementwise(op, a_off, binary ? a_off : Tensor(), dt)));
          Tensor inplace = a.clone();
          elementwise_into(op, inplace, inplace, binary ? b : Tensor());
          res.push_back(bytes_of(inplace));
        }
      }
      for (size_t i = 3; i < res.size(); ++i)
        EXPECT_TRUE(res[i] == res[i % 3]) << isa_label() << " " << dtype_name(dt) << " "
                                          << ew_name(op) << " case " << i;
    }
  }
}

// stream_copy itself: every head / tail split of a 32-byte-aligned line around the copy.
TEST_P(EwStream, StreamCopyCopiesEveryByte) {
  const EwTable& tab = ew_table(isa());
  alignas(64) char src[256], dst[256];
  for (int i = 0; i < 256; ++i) src[i] = static_cast<char>(i * 7 + 1);
  for (int off = 0; off < 33; ++off)
    for (int len : {0, 1, 31, 32, 33, 64, 100, 190}) {
      std::memset(dst, 0, sizeof dst);
      tab.stream_copy(dst + off, src + 3, len);
      for (int i = 0; i < 256; ++i) {
        const char want = i >= off && i < off + len ? src[3 + i - off] : 0;
        ASSERT_EQ(dst[i], want) << isa_label() << " off " << off << " len " << len << " byte " << i;
      }
    }
}

}  // namespace
}  // namespace hp::kernels
