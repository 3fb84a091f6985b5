// MX GEMM on this CPU: decode-in-pack to bf16 or f32 panels, then one library call per C tile and
// K chunk: the native bf16 tile kernel (kernels/cpu/gemm_native.h, oneDNN on AVX512_BF16) or the
// f32 one (sgemm_tile: OpenBLAS, or oneDNN's sgemm on AVX-512).
//
// bf16 panels where the bf16 GEMM is native (docs/ARCHITECTURE.md §4): an E4M3/E5M2 value (3 or 2
// mantissa bits) times a power-of-two E8M0 scale is exact in bf16 (7 mantissa bits, f32's
// exponent range) while the scaled value stays in bf16's normal range, and that is cheap to check
// per operand from the smallest and largest scale byte (bf16_exact_scales). AVX512_BF16 flushes
// denormals, so an operand whose blocks could reach the subnormal range, or overflow, takes the
// f32 path; so do all operands where bf16 is not native.
//
// f32 panels otherwise: an FP8 value times any E8M0 scale is exact in f32 except where it falls
// into the f32 subnormal range, exactly as dequantize_* computes it, with the same SIMD decode
// kernel (kernels.h `dequant`), and both sgemm libraries keep subnormals.
//
// Work per C tile [mt, nt]: for each K chunk, decode the A panel ([mt, kc] for rowwise_k,
// [kc, mt] for colwise_k) and the B panel ([nt, kc] / [kc, nt]) and accumulate with one call whose
// transpose flags match the panel layouts, so colwise operands need no transpose either. Tiles and
// chunks depend on (M, N, K) only: bitwise identical results for any thread count.
#include "hp/mx/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/thread_pool.h"
#include "hp/kernels/cpu/gemm_native.h"
#include "hp/kernels/cpu/gemm_plan.h"
#include "hp/mx/driver.h"
#include "hp/mx/quantize.h"

namespace hp::mx {
namespace {

using detail::ceil_div;
constexpr int64_t kB = kBlockSize;
// K chunk decoded per library call (a multiple of 32, so chunks start on block boundaries):
// panels [tile, 512] f32 stay in L2/L3, as in the bf16 GEMM. bf16 panels are half the size, and
// fewer chunks mean fewer passes over C.
constexpr int64_t kKChunk = 512;
constexpr int64_t kKChunkBf16 = 1024;
// Scale bytes whose blocks decode to bf16 normals (or zero) and stay finite: an element of
// magnitude in [2^e_min, 2^(e_max+1)) times 2^(s-127) must lie in [2^-126, 2^128). E4M3 spans
// [2^-9, 448 < 2^9), E5M2 [2^-16, 57344 < 2^16). Byte 255 (NaN) is outside both.
struct ScaleRange {
  int lo, hi;
};
constexpr ScaleRange kBf16ExactE4m3{-126 + 9 + 127, 127 - 8 + 127};   // [10, 246]
constexpr ScaleRange kBf16ExactE5m2{-126 + 16 + 127, 127 - 15 + 127};  // [17, 239]
// An operand as the packer reads it: codes row stride ld, scales row stride lds (elements).
struct Src {
  const uint8_t* codes;
  const uint8_t* scales;
  int elem;  // 0 = e4m3, 1 = e5m2 (kernels.h)
  bool colwise;
  int64_t ld, lds;
};

// One dense product C [M, N] (row stride N) = alpha · A [M, K] · B [N, K]ᵀ + beta · C.
struct Job {
  Src a, b;
  int64_t M, N, K;
  char* c;
};

struct Tile {
  int64_t job, m0, n0, mt, nt;
};

Src make_src(const MxOperand& op, int64_t rows, int64_t K) {
  const bool col = op.layout == MxLayout::colwise_k;
  return Src{op.codes, op.scales,      op.elem == ElemFormat::e5m2 ? 1 : 0,
             col,      col ? rows : K, col ? rows : ceil_div(K, kB)};
}

// Appends the tile grid of one job: the GEMM backend's shape-only plan (kernels/cpu/gemm_plan.h).
void append_tiles(int64_t job, int64_t M, int64_t N, int64_t K, std::vector<Tile>& tiles) {
  const kernels::detail::TilePlan p = kernels::detail::plan_tiles(M, N, K);
  for (int64_t m0 = 0; m0 < M; m0 += p.tile_m)
    for (int64_t n0 = 0; n0 < N; n0 += p.tile_n)
      tiles.push_back({job, m0, n0, std::min(p.tile_m, M - m0), std::min(p.tile_n, N - n0)});
}

// True where every block of the operand (its `count` scale bytes) decodes exactly to a bf16
// normal or zero: one pass over the scales, 1/32 of the codes.
bool bf16_exact_scales(const MxOperand& op, int64_t count) {
  const ScaleRange r = op.elem == ElemFormat::e5m2 ? kBf16ExactE5m2 : kBf16ExactE4m3;
  const auto [lo, hi] = std::minmax_element(op.scales, op.scales + count);
  return count == 0 || (*lo >= r.lo && *hi <= r.hi);
}

// Decodes operand rows [r0, r0 + nr) × K range [k0, k0 + kc) (k0 % 32 == 0) into out (elements of
// osz bytes: 4 f32, 2 bf16): [nr, kc] for rowwise operands, [kc, nr] for colwise ones (the stored
// orientation, no transpose).
void decode_panel(const detail::Kernels& k, const Src& s, int64_t r0, int64_t nr, int64_t k0,
                  int64_t kc, char* out, int64_t osz) {
  if (!s.colwise) {
    for (int64_t r = 0; r < nr; ++r)
      detail::dequant_row(k, s.codes + (r0 + r) * s.ld + k0, s.scales + (r0 + r) * s.lds + k0 / kB,
                          5, kc, s.elem, out + r * kc * osz, osz);
  } else {
    for (int64_t kk = 0; kk < kc; ++kk)
      detail::dequant_row(k, s.codes + (k0 + kk) * s.ld + r0,
                          s.scales + ((k0 + kk) / kB) * s.lds + r0, 0, nr, s.elem,
                          out + kk * nr * osz, osz);
  }
}

// c_out [mt, nt] (row stride ldc, f32) = alpha · op(A panel) · op(B panel) + beta · c_out over one
// K chunk of kc, on the native bf16 tile kernel (bf16 panels) or sgemm (f32 panels).
void panel_product(bool native, const Tile& t, int64_t kc, bool a_col, bool b_col, float alpha,
                   const char* a_panel, const char* b_panel, float beta, float* c_out,
                   int64_t ldc) {
  const int64_t lda = a_col ? t.mt : kc, ldb = b_col ? t.nt : kc;
  if (native) {
    const kernels::detail::Bf16Tile bt{a_col, !b_col, t.mt,       t.nt,  kc,  lda,
                                       ldb,   ldc,    DType::f32, alpha, beta};
    kernels::detail::bf16_tile_gemm(bt, reinterpret_cast<const uint16_t*>(a_panel),
                                    reinterpret_cast<const uint16_t*>(b_panel), c_out);
    return;
  }
  kernels::detail::sgemm_tile(a_col, !b_col, t.mt, t.nt, kc, alpha,
                              reinterpret_cast<const float*>(a_panel), lda,
                              reinterpret_cast<const float*>(b_panel), ldb, beta, c_out, ldc);
}

void run_tile(const detail::Kernels& k, const Job& j, const Tile& t, DType c_dtype, float alpha,
              float beta, bool native) {
  char* c = j.c + (t.m0 * j.N + t.n0) * static_cast<int64_t>(dtype_size(c_dtype));
  if (j.K == 0 || alpha == 0.0f) {
    kernels::detail::scale_rows(t.mt, t.nt, beta, c, c_dtype, j.N);
    return;
  }
  thread_local std::vector<float> work;
  const int64_t chunk = native ? kKChunkBf16 : kKChunk;
  const int64_t psz = native ? 2 : 4;  // panel element bytes
  const int64_t kc_max = std::min(j.K, chunk);
  const bool c_bf16 = c_dtype == DType::bf16;
  const int64_t panel_floats = ceil_div((t.mt + t.nt) * kc_max * psz, 4);
  work.resize(size_t(panel_floats + (c_bf16 ? t.mt * t.nt : 0)));
  char* a_panel = reinterpret_cast<char*>(work.data());  // [mt, kc] or [kc, mt]
  char* b_panel = a_panel + t.mt * kc_max * psz;         // [nt, kc] or [kc, nt]
  float* c_out = reinterpret_cast<float*>(c);
  int64_t ldc = j.N;
  if (c_bf16) {
    c_out = work.data() + panel_floats;  // [mt, nt] f32, rounded to bf16 once at the end
    ldc = t.nt;
    if (beta != 0.0f)
      kernels::detail::widen_bf16(reinterpret_cast<uint16_t*>(c), j.N, t.mt, t.nt, c_out);
  }
  for (int64_t k0 = 0; k0 < j.K; k0 += chunk) {
    const int64_t kc = std::min(chunk, j.K - k0);
    decode_panel(k, j.a, t.m0, t.mt, k0, kc, a_panel, psz);
    decode_panel(k, j.b, t.n0, t.nt, k0, kc, b_panel, psz);
    panel_product(native, t, kc, j.a.colwise, j.b.colwise, alpha, a_panel, b_panel,
                  k0 == 0 ? beta : 1.0f, c_out, ldc);
  }
  if (c_bf16) kernels::detail::narrow_bf16(c_out, t.mt, t.nt, reinterpret_cast<uint16_t*>(c), j.N);
}

// Runs every tile of every job over the pool; each C element is owned by one tile, so which thread
// runs a tile does not change the result. Tiles are handed out dynamically, largest first: grouped
// problems have tiles of very different sizes (skewed token counts), and on a shared machine one
// thread may get less CPU than the other.
// native: decode to bf16 panels for the native tile kernel (the caller checked the scales).
void run_jobs(const std::vector<Job>& jobs, DType c_dtype, float alpha, float beta, bool native) {
  std::vector<Tile> tiles;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].M > 0 && jobs[i].N > 0)
      append_tiles(int64_t(i), jobs[i].M, jobs[i].N, jobs[i].K, tiles);
  if (tiles.empty()) return;
  auto work = [&](const Tile& t) {
    return double(t.mt) * double(t.nt) * double(jobs[size_t(t.job)].K + 1);
  };
  std::stable_sort(tiles.begin(), tiles.end(),
                   [&](const Tile& x, const Tile& y) { return work(x) > work(y); });
  kernels::detail::blas_single_threaded();
  const detail::Kernels& k = kernels::kernel_table<detail::Kernels>();
  const int64_t n = int64_t(tiles.size());
  std::atomic<int64_t> next{0};
  parallel_for(0, std::min<int64_t>(n, num_threads()), 1, [&](int64_t, int64_t) {
    for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      const Tile& t = tiles[size_t(i)];
      run_tile(k, jobs[size_t(t.job)], t, c_dtype, alpha, beta, native);
    }
  });
}

void check_common(const char* fn, int64_t M, int64_t N, int64_t K, const void* c, DType c_dtype) {
  if (M < 0 || N < 0 || K < 0)
    HP_THROW(ValueError, "mx", fn, ": negative size M=", M, " N=", N, " K=", K);
  if (c_dtype != DType::f32 && c_dtype != DType::bf16)
    HP_THROW(ValueError, "mx", fn, ": output dtype must be f32 or bf16, got ", dtype_name(c_dtype));
  detail::check_ptr(fn, "c", c, M * N);
}

void check_operand(const char* fn, const char* name, const MxOperand& op, int64_t rows, int64_t K) {
  detail::check_ptr(fn, name, op.codes, rows * K);
  detail::check_ptr(fn, name, op.scales, rows * K);
  if (op.layout != MxLayout::rowwise_k && op.layout != MxLayout::colwise_k)
    HP_THROW(ValueError, "mx", fn, ": ", name, " has an unknown layout ", int(op.layout));
  if (op.elem != ElemFormat::e4m3 && op.elem != ElemFormat::e5m2)
    HP_THROW(ValueError, "mx", fn, ": ", name, " has an unknown element format ", int(op.elem));
}

// Checks group_ends (non-decreasing, within [0, rows]); returns the group starts.
std::vector<int64_t> group_starts(const char* fn, const int32_t* group_ends, int64_t num_groups,
                                  int64_t rows) {
  if (num_groups < 0) HP_THROW(ValueError, "mx", fn, ": num_groups=", num_groups, " < 0");
  detail::check_ptr(fn, "group_ends", group_ends, num_groups);
  std::vector<int64_t> starts(static_cast<size_t>(num_groups));
  int64_t prev = 0;
  for (int64_t g = 0; g < num_groups; ++g) {
    if (group_ends[g] < prev || group_ends[g] > rows)
      HP_THROW(ValueError, "mx", fn, ": group_ends[", g, "]=", group_ends[g],
               " must be non-decreasing and within [", prev, ", ", rows, "]");
    starts[size_t(g)] = prev;
    prev = group_ends[g];
  }
  return starts;
}

// The bf16 panel path: native bf16 here, and both operands (a_scales / b_scales scale bytes)
// decode exactly to bf16 normals.
bool use_bf16_panels(const MxOperand& a, int64_t a_scales, const MxOperand& b, int64_t b_scales) {
  return kernels::detail::native_bf16_gemm() && bf16_exact_scales(a, a_scales) &&
         bf16_exact_scales(b, b_scales);
}

}  // namespace

bool mx_gemm_uses_bf16(const MxOperand& a, const MxOperand& b, int64_t M, int64_t N, int64_t K) {
  const int64_t nbk = ceil_div(K, kB);
  return use_bf16_panels(a, M * nbk, b, N * nbk);
}

void mx_gemm(const MxOperand& a, const MxOperand& b, int64_t M, int64_t N, int64_t K, void* c,
             DType c_dtype, float alpha, float beta) {
  const char* fn = "mx_gemm";
  check_common(fn, M, N, K, c, c_dtype);
  check_operand(fn, "a", a, M, K);
  check_operand(fn, "b", b, N, K);
  const int64_t nbk = ceil_div(K, kB);
  run_jobs({Job{make_src(a, M, K), make_src(b, N, K), M, N, K, static_cast<char*>(c)}}, c_dtype,
           alpha, beta, use_bf16_panels(a, M * nbk, b, N * nbk));
}

void mx_grouped_gemm(const MxOperand& a, const MxOperand& b, const int32_t* group_ends,
                     int64_t num_groups, int64_t M, int64_t N, int64_t K, void* c, DType c_dtype,
                     float alpha, float beta) {
  const char* fn = "mx_grouped_gemm";
  check_common(fn, M, N, K, c, c_dtype);
  if (a.layout != MxLayout::rowwise_k)
    HP_THROW(ValueError, "mx", fn, ": a (the token rows) must be rowwise_k");
  check_operand(fn, "a", a, M, K);
  check_operand(fn, "b", b, num_groups * N, K);
  const std::vector<int64_t> starts = group_starts(fn, group_ends, num_groups, M);
  const int64_t nbk = ceil_div(K, kB);
  const int64_t b_scale_stride = b.layout == MxLayout::rowwise_k ? N * nbk : nbk * N;
  const size_t osz = dtype_size(c_dtype);
  std::vector<Job> jobs;
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t s = starts[size_t(g)], mg = group_ends[g] - s;
    MxOperand ag = a, bg = b;
    ag.codes = a.codes + s * K;
    ag.scales = a.scales + s * nbk;
    bg.codes = b.codes + g * N * K;
    bg.scales = b.scales + g * b_scale_stride;
    jobs.push_back(Job{make_src(ag, mg, K), make_src(bg, N, K), mg, N, K,
                       static_cast<char*>(c) + s * N * int64_t(osz)});
  }
  run_jobs(jobs, c_dtype, alpha, beta, use_bf16_panels(a, M * nbk, b, num_groups * N * nbk));
}

void mx_grouped_gemm_wgrad(const MxOperand& a, const MxOperand& b, const int32_t* group_ends,
                           int64_t num_groups, int64_t T, int64_t M, int64_t N, void* c,
                           DType c_dtype, float alpha, float beta) {
  const char* fn = "mx_grouped_gemm_wgrad";
  check_common(fn, num_groups * M, N, T, c, c_dtype);
  if (a.layout != MxLayout::colwise_k || b.layout != MxLayout::colwise_k)
    HP_THROW(ValueError, "mx", fn, ": a and b must be colwise_k (grouped column-wise)");
  check_operand(fn, "a", a, M, T);
  check_operand(fn, "b", b, N, T);
  const std::vector<int64_t> starts = group_starts(fn, group_ends, num_groups, T);
  const size_t osz = dtype_size(c_dtype);
  std::vector<Job> jobs;
  int64_t scale_row = 0;  // first scale row of group g in the stacked grouped layout
  for (int64_t g = 0; g < num_groups; ++g) {
    const int64_t s = starts[size_t(g)], kg = group_ends[g] - s;
    MxOperand ag = a, bg = b;
    ag.codes = a.codes + s * M;
    ag.scales = a.scales + scale_row * M;
    bg.codes = b.codes + s * N;
    bg.scales = b.scales + scale_row * N;
    jobs.push_back(Job{make_src(ag, M, kg), make_src(bg, N, kg), M, N, kg,
                       static_cast<char*>(c) + g * M * N * int64_t(osz)});
    scale_row += ceil_div(kg, kB);
  }
  run_jobs(jobs, c_dtype, alpha, beta, use_bf16_panels(a, scale_row * M, b, scale_row * N));
}

}  // namespace hp::mx
