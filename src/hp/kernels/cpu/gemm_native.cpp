// Native bf16 tiles on oneDNN 2.6 (Debian libdnnl). Why oneDNN per tile and not one whole-problem
// call: our shape-only tile plan keeps results bitwise independent of the thread count, which
// oneDNN's own threading does not promise. Its implementation for a strided tile is "gemm:jit"
// (the AVX512_BF16 jit GEMM); brgemm ("brg:avx512_core_bf16") is picked only for dense operands,
// and single-threaded both reach the same GFLOP/s (figures: docs/PERFORMANCE.md).
//
// Primitives are cached here, keyed by everything that shapes them (Bf16Tile): creating a
// primitive descriptor costs far more than oneDNN's own primitive cache saves, and a training step
// repeats the same few tile shapes. Each thread also remembers its last primitive, so a GEMM's
// tiles take the lock once per thread and shape, not once per tile. Scratchpads are user-managed,
// one per thread, so one primitive runs concurrently on several pool threads.
#include "hp/kernels/cpu/gemm_native.h"

#include <atomic>
#include <bit>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "hp/core/error.h"
#include "hp/kernels/cpu/gemm_plan.h"
#include "hp/kernels/cpu/isa.h"
#include "hp/kernels/cpu/omp_threads.h"

namespace hp::kernels::detail {
namespace {

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                       uint32_t, uint32_t>;

Key key_of(const Bf16Tile& t) {
  // alpha and beta by their bits: -0.0 and NaN are distinct, well-ordered keys.
  return {t.trans_a, t.trans_b, t.mt,  t.nt, t.K, t.lda, t.ldb, t.ldc, static_cast<int>(t.c_dtype),
          std::bit_cast<uint32_t>(t.alpha), std::bit_cast<uint32_t>(t.beta)};
}

// A tuned training step uses a few dozen tile shapes; a process that sees endless new shapes
// (varying sequence lengths) drops the cache instead of growing without bound.
constexpr size_t kMaxCached = 4096;

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

struct Primitive {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  size_t scratch_bytes = 0;
};

std::shared_ptr<const Primitive> create(const Bf16Tile& t) {
  using dnnl::memory;
  const auto bf16 = memory::data_type::bf16;
  const auto c_type = t.c_dtype == DType::bf16 ? bf16 : memory::data_type::f32;
  // op(A) [mt, K] and op(B) [K, nt] as strided views of the stored operands.
  const memory::dims a_strides = t.trans_a ? memory::dims{1, t.lda} : memory::dims{t.lda, 1};
  const memory::dims b_strides = t.trans_b ? memory::dims{1, t.ldb} : memory::dims{t.ldb, 1};
  const memory::desc a({t.mt, t.K}, bf16, a_strides);
  const memory::desc b({t.K, t.nt}, bf16, b_strides);
  const memory::desc c({t.mt, t.nt}, c_type, memory::dims{t.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (t.alpha != 1.0f) attr.set_output_scales(0, {t.alpha});
  if (t.beta != 0.0f) {
    dnnl::post_ops po;
    po.append_sum(t.beta);
    attr.set_post_ops(po);
  }
  auto p = std::make_shared<Primitive>();
  try {
    p->pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, engine());
    p->prim = dnnl::matmul(p->pd);
  } catch (const dnnl::error& e) {
    HP_THROW(InternalError, "gemm", "oneDNN cannot build the bf16 tile ", t.mt, "x", t.nt, "x", t.K,
             " (lda=", t.lda, " ldb=", t.ldb, " ldc=", t.ldc, "): ", e.what());
  }
  p->scratch_bytes = p->pd.scratchpad_desc().get_size();
  return p;
}

struct Cache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<const Primitive>> map;
};

Cache& cache() {
  static Cache c;
  return c;
}

std::shared_ptr<const Primitive> lookup(const Bf16Tile& t) {
  const Key key = key_of(t);
  thread_local Key last_key;
  thread_local std::shared_ptr<const Primitive> last;
  if (last && last_key == key) return last;
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(key);
  if (it == c.map.end()) {
    if (c.map.size() >= kMaxCached) c.map.clear();  // holders keep theirs alive (shared_ptr)
    it = c.map.emplace(key, create(t)).first;
  }
  last_key = key;
  last = it->second;
  return last;
}

// -1: the CPU's choice; 0: widen; 1: native where the hardware has it.
int mode_from_env() {
  const char* env = std::getenv("HP_BF16_GEMM");
  if (!env || !*env) return -1;
  const std::string s(env);
  if (s == "native") return 1;
  if (s == "widen") return 0;
  HP_THROW(ValueError, "gemm", "HP_BF16_GEMM='", s, "' must be native or widen");
}

std::atomic<int>& forced_mode() {
  static std::atomic<int> mode{mode_from_env()};
  return mode;
}

}  // namespace

bool native_bf16_gemm() {
  if (!native_bf16() || active_isa() != Isa::avx512) return false;
  const int mode = forced_mode().load(std::memory_order_relaxed);
  return mode < 0 ? bf16_compute_pays() : mode == 1;
}

void force_native_bf16_gemm(int mode) {
  forced_mode().store(mode < 0 ? mode_from_env() : mode);
}

std::string bf16_gemm_summary() {
  if (!native_bf16_gemm()) return "bf16 GEMM widened to f32, " + sgemm_library();
  // A 1024^2 tile of a 2048-wide problem: strided, as most tiles are (dense operands may get
  // another implementation, e.g. brgemm).
  const Bf16Tile probe{false, true, 1024, 1024, 1024, 2048, 2048, 2048, DType::f32, 1.0f, 0.0f};
  return "bf16 GEMM oneDNN native per tile (" + bf16_tile_impl(probe) + ")";
}

void bf16_tile_gemm(const Bf16Tile& t, const uint16_t* A, const uint16_t* B, void* C) {
  const std::shared_ptr<const Primitive> p = lookup(t);
  thread_local std::unique_ptr<dnnl::stream> strm;
  thread_local std::vector<char> scratch;
  if (!strm) strm = std::make_unique<dnnl::stream>(engine());
  // At least one byte, so the scratchpad memory never wraps a null handle.
  if (scratch.size() < p->scratch_bytes + 1) scratch.resize(p->scratch_bytes + 1);
  using dnnl::memory;
  // oneDNN's memory objects take non-const handles; it only reads A and B.
  const memory a(p->pd.src_desc(), engine(), const_cast<uint16_t*>(A));
  const memory b(p->pd.weights_desc(), engine(), const_cast<uint16_t*>(B));
  const memory c(p->pd.dst_desc(), engine(), C);
  const memory s(p->pd.scratchpad_desc(), engine(), scratch.data());
  const OmpThreads one(1);
  p->prim.execute(*strm, {{DNNL_ARG_SRC, a},
                          {DNNL_ARG_WEIGHTS, b},
                          {DNNL_ARG_DST, c},
                          {DNNL_ARG_SCRATCHPAD, s}});
  strm->wait();
}

std::string bf16_tile_impl(const Bf16Tile& t) {
  return lookup(t)->pd.impl_info_str();
}

int64_t bf16_tile_cache_size() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return static_cast<int64_t>(c.map.size());
}

}  // namespace hp::kernels::detail
