// Context parallelism (context_parallel.h): zigzag spans, ring attention over the flash kernels,
// and Ulysses over a differentiable all-to-all.
#include "hp/parallel/context_parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <tuple>

#include "hp/autograd/grad_mode.h"
#include "hp/autograd/node.h"
#include "hp/core/error.h"
#include "hp/kernels/cpu/attention.h"
#include "hp/ops/ops.h"
#include "hp/parallel/all_to_all.h"

namespace hp::parallel {

std::vector<Span> context_spans(int64_t length, int64_t degree, int64_t index) {
  if (degree < 1 || index < 0 || index >= degree)
    HP_THROW(ValueError, "shard", "context-parallel rank ", index, " of ", degree,
             " is out of range");
  if (degree == 1) return {{0, length}};
  if (length % (2 * degree) != 0)
    HP_THROW(ValueError, "shard", "a sequence of ", length,
             " tokens does not split into 2 × cp = ", 2 * degree,
             " equal chunks (context parallelism's load-balanced layout); make the length a "
             "multiple of ",
             2 * degree);
  const int64_t c = length / (2 * degree);
  return {{index * c, c}, {(2 * degree - 1 - index) * c, c}};
}

Tensor context_shard(const Tensor& x, int64_t dim, int64_t degree, int64_t index) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  const std::vector<Span> spans = context_spans(x.size(d), degree, index);
  if (spans.size() == 1) return x;
  std::vector<Tensor> parts;
  for (const Span& s : spans) parts.push_back(narrow(x, d, s.start, s.length));
  return cat(parts, d);
}

ContextMethod context_method_from_name(const std::string& name) {
  if (name == "ring") return ContextMethod::ring;
  if (name == "alltoall") return ContextMethod::alltoall;
  HP_THROW(ValueError, "shard", "unknown context-parallel method '", name,
           "' (ring or alltoall)");
}

namespace {

std::mutex stats_mu;
RingStats stats;
std::atomic<bool> skip_comm{false};

// Waits for w, counting the blocked time as exposed communication; returns its result.
Tensor timed_result(const dist::WorkPtr& w) {
  const auto t0 = std::chrono::steady_clock::now();
  Tensor r = w->result();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.exposed_s += s;
  return r;
}
void timed_wait(const dist::WorkPtr& w) {
  const auto t0 = std::chrono::steady_clock::now();
  w->wait();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.exposed_s += s;
}
void count_bytes(const Tensor& t) {
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.bytes += t.numel() * int64_t(dtype_size(t.dtype()));
}

// A contiguous f32 [B, H, T, D] operand seen from row `t0`: the kernels take a base pointer plus
// (b, h, t) strides, so a row range of the local sequence needs no copy.
struct Rows {
  float* base;
  int64_t heads, seq, dim;
  kernels::AttentionInput in(int64_t t0) const {
    return {base + t0 * dim, kernels::attention_strides_bhtd(heads, seq, dim)};
  }
  kernels::AttentionOutput out(int64_t t0) const {
    return {base + t0 * dim, kernels::attention_strides_bhtd(heads, seq, dim)};
  }
};
Rows rows_of(const Tensor& t) {
  HP_CHECK(t.is_contiguous() && t.dtype() == DType::f32 && t.dim() == 4, "ring operand ",
           t.desc());
  return {t.data<float>(), t.size(1), t.size(2), t.size(3)};
}

// dst rows [t0, t0 + src_seq) += src, over [BH, seq, D] buffers.
void add_rows(float* dst, int64_t dst_seq, int64_t t0, const float* src, int64_t src_seq,
              int64_t bh, int64_t d) {
  for (int64_t i = 0; i < bh; ++i) {
    float* o = dst + (i * dst_seq + t0) * d;
    const float* s = src + i * src_seq * d;
    for (int64_t j = 0; j < src_seq * d; ++j) o[j] += s[j];
  }
}

// The block of a ring step: which local query rows see which kv columns of the block from rank
// `src` (context_parallel.h): {q0, nq, k0, nk, causal}, c = half the local sequence.
struct Block {
  int64_t q0, nq, k0, nk;
  bool causal;
};
Block block_for(int src, int rank, int64_t c) {
  if (src == rank) return {0, 2 * c, 0, 2 * c, true};
  if (src < rank) return {0, 2 * c, 0, c, false};
  return {c, c, 0, 2 * c, false};
}

struct RingGeometry {
  int64_t b, hq, hkv, t, d, c;
  float scale;
  // Packed documents: every cp rank's local document ids, i32 [cp, B, T] (rank s's rows are its
  // zigzag spans of the whole row's ids, non-decreasing), or undefined.
  Tensor seg;
  kernels::AttentionShape shape(const Block& k) const { return {b, hq, hkv, k.nq, k.nk, d}; }
  // Block k of this rank's queries (`rank`) against rank `src`'s keys.
  kernels::AttentionOptions options(const Block& k, int rank, int src) const {
    kernels::AttentionOptions o{k.causal, scale, DType::f32};
    if (seg.defined()) {
      const int32_t* ids = seg.data<int32_t>();
      o.segments = {ids + rank * b * t + k.q0, t, ids + src * b * t + k.k0, t};
    }
    return o;
  }
};

// [2, B, Hkv, T, D]: k then v, one message per hop.
Tensor pack_kv(const Tensor& k, const Tensor& v) {
  return contiguous(cat({unsqueeze(k, 0), unsqueeze(v, 0)}, 0));
}

// lse rows [t0, t0 + n) of a [B, H, T] buffer, contiguous.
Tensor lse_rows(const Tensor& lse, int64_t t0, int64_t n) {
  return n == lse.size(2) ? lse : contiguous(narrow(lse, 2, t0, n));
}

// Forward: o [B, Hq, T, D] and lse [B, Hq, T] of the whole-sequence causal attention, and the
// K/V [2, B, Hkv, T, D] the last hop brought (rank r+1's; this rank's own when n == 1), which the
// backward starts from.
std::tuple<Tensor, Tensor, Tensor> ring_forward(const Tensor& q, const Tensor& kv, const RingGeometry& g,
                                       const dist::CommPtr& comm) {
  const int n = comm->size(), r = comm->rank();
  Tensor o = zeros({g.b, g.hq, g.t, g.d});
  Tensor lse = full({g.b, g.hq, g.t}, -std::numeric_limits<double>::infinity());
  Tensor blk_o = empty({g.b, g.hq, g.t, g.d}), blk_lse = empty({g.b, g.hq, g.t});
  Tensor cur = kv;
  const Rows qr = rows_of(q);
  for (int i = 0; i < n; ++i) {
    const int src = (r - i + n) % n;
    dist::WorkPtr send, recv;
    if (i + 1 < n && !skip_comm) {  // the next block travels while this one is multiplied
      send = comm->isend(cur, (r + 1) % n, 11);
      recv = comm->irecv(cur.shape(), DType::f32, (r - 1 + n) % n, 11);
      count_bytes(cur);
    }
    const Block k = block_for(src, r, g.c);
    const Rows kr{cur.data<float>(), g.hkv, g.t, g.d};
    const Rows vr{cur.data<float>() + g.b * g.hkv * g.t * g.d, g.hkv, g.t, g.d};
    const Rows outr{blk_o.data<float>(), g.hq, k.nq, g.d};
    kernels::attention_forward(g.shape(k), g.options(k, r, src), qr.in(k.q0), kr.in(k.k0),
                               vr.in(k.k0), outr.out(0), blk_lse.data<float>());
    // Online-softmax merge of rows [q0, q0 + nq): weights exp(lse_part − lse_total).
    float* po = o.data<float>();
    float* pl = lse.data<float>();
    const float* bo = blk_o.data<float>();
    const float* bl = blk_lse.data<float>();
    for (int64_t bh = 0; bh < g.b * g.hq; ++bh)
      for (int64_t j = 0; j < k.nq; ++j) {
        float& la = pl[bh * g.t + k.q0 + j];
        const float lb = bl[bh * k.nq + j];
        float* oa = po + (bh * g.t + k.q0 + j) * g.d;
        const float* ob = bo + (bh * k.nq + j) * g.d;
        if (la == -std::numeric_limits<float>::infinity()) {
          std::copy(ob, ob + g.d, oa);
          la = lb;
          continue;
        }
        const float m = std::max(la, lb);
        const float l = m + std::log(std::exp(la - m) + std::exp(lb - m));
        const float wa = std::exp(la - l), wb = std::exp(lb - l);
        for (int64_t e = 0; e < g.d; ++e) oa[e] = wa * oa[e] + wb * ob[e];
        la = l;
      }
    if (send) {
      cur = timed_result(recv);
      timed_wait(send);
    }
  }
  return {o, lse, cur};
}

// Backward: dq [B, Hq, T, D] and dkv [2, B, Hkv, T, D] (this rank's K/V gradients). It runs the
// forward's ring in reverse: step i multiplies the K/V of rank r+1+i, starting from the K/V the
// forward's last hop left here (`kv_next`) and ending with this rank's own block. K/V and each
// block's accumulated dK/dV travel to rank r−1, and the dK/dV of this rank's own K/V arrive from
// rank r+1 while its own block is multiplied. So no hop waits after the last block (in forward
// order the dK/dV need one more hop home that nothing overlaps): n−2 K/V and n−1 dK/dV hops.
std::pair<Tensor, Tensor> ring_backward(const Tensor& q, const Tensor& kv, const Tensor& kv_next,
                                        const Tensor& o, const Tensor& lse, const Tensor& dout,
                                        const RingGeometry& g, const dist::CommPtr& comm) {
  const int n = comm->size(), r = comm->rank();
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  Tensor dq = zeros({g.b, g.hq, g.t, g.d});
  Tensor dkv;
  Tensor tq = empty({g.b, g.hq, g.t, g.d}), tk = empty({g.b, g.hkv, g.t, g.d}),
         tv = empty({g.b, g.hkv, g.t, g.d});
  const Tensor lse_second = lse_rows(lse, g.c, g.c);
  const Rows qr = rows_of(q), orr = rows_of(o), dor = rows_of(dout);
  Tensor cur = skip_comm ? kv : kv_next;
  dist::WorkPtr send_d;  // the dK/dV hop leaving
  for (int i = 0; i < n; ++i) {
    const bool own = i + 1 == n;
    const int src = own ? r : (r + 1 + i) % n;
    dist::WorkPtr send_kv, recv_kv, recv_d;
    if (!skip_comm) {
      if (i + 2 < n) {  // the next (remote) block's K/V travel while this one is multiplied
        send_kv = comm->isend(cur, prev, 12);
        recv_kv = comm->irecv(cur.shape(), DType::f32, next, 12);
        count_bytes(cur);
      }
      if (i > 0) recv_d = comm->irecv(kv.shape(), DType::f32, next, 13);
    }
    const Tensor& blk = own ? kv : cur;
    const Block k = block_for(src, r, g.c);
    const Rows kr{blk.data<float>(), g.hkv, g.t, g.d};
    const Rows vr{blk.data<float>() + g.b * g.hkv * g.t * g.d, g.hkv, g.t, g.d};
    const float* l = (k.q0 == 0 ? lse : lse_second).data<float>();
    kernels::attention_backward(g.shape(k), g.options(k, r, src), qr.in(k.q0), kr.in(k.k0),
                                vr.in(k.k0), orr.in(k.q0), l, dor.in(k.q0),
                                Rows{tq.data<float>(), g.hq, k.nq, g.d}.out(0),
                                Rows{tk.data<float>(), g.hkv, k.nk, g.d}.out(0),
                                Rows{tv.data<float>(), g.hkv, k.nk, g.d}.out(0));
    add_rows(dq.data<float>(), g.t, k.q0, tq.data<float>(), k.nq, g.b * g.hq, g.d);
    // The block's dK/dV accumulated by ranks r+1, r+2, … (none for the first block) plus this
    // rank's share; they go on to rank r−1, except the last block's, which are this rank's own.
    Tensor acc = recv_d ? timed_result(recv_d) : zeros(kv.shape());
    float* dk = acc.data<float>();
    add_rows(dk, g.t, k.k0, tk.data<float>(), k.nk, g.b * g.hkv, g.d);
    add_rows(dk + g.b * g.hkv * g.t * g.d, g.t, k.k0, tv.data<float>(), k.nk, g.b * g.hkv, g.d);
    if (send_d) timed_wait(send_d);
    send_d = nullptr;
    if (own) {
      dkv = acc;
    } else if (!skip_comm) {
      send_d = comm->isend(acc, prev, 13);
      count_bytes(acc);
    }
    if (send_kv) {
      cur = timed_result(recv_kv);
      timed_wait(send_kv);
    }
  }
  return {dq, dkv};
}

Tensor ring_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, float scale,
                      const dist::CommPtr& comm, const Tensor& segments) {
  const Tensor q = contiguous(q_in);
  const Tensor kv = pack_kv(k_in, v_in);
  const int64_t t = q.size(2);
  if (t % 2 != 0)
    HP_THROW(ValueError, "shard", "ring attention needs the two zigzag chunks of equal length; "
             "this rank holds ", t, " tokens");
  RingGeometry g{q.size(0), q.size(1), k_in.size(1), t, q.size(3), t / 2, scale, Tensor()};
  if (segments.defined()) {
    // Every rank's spans of the whole rows' ids: the ids of the K/V a hop brings are known here
    // (all cp ranks hold the same rows), so none travel with them.
    std::vector<Tensor> per_rank;
    for (int s = 0; s < comm->size(); ++s)
      per_rank.push_back(unsqueeze(context_shard(segments, 1, comm->size(), s), 0));
    g.seg = contiguous(cat(per_rank, 0));  // [cp, B, T]
  }
  Tensor o, lse, kv_next;
  {
    autograd::NoGradGuard ng;
    std::tie(o, lse, kv_next) = ring_forward(q, kv, g, comm);
  }
  if (autograd::needs_grad({q_in, k_in, v_in})) {
    // kv_next: one more K/V chunk kept for the backward, which saves it two hops.
    autograd::SavedTensor sq(q), skv(kv), snext(kv_next), so(o), sl(lse);
    autograd::record("RingAttention", {q_in, k_in, v_in}, {o},
                     [=](const std::vector<Tensor>& grads) {
                       auto [dq, dkv] = ring_backward(sq.unpack(), skv.unpack(), snext.unpack(),
                                                      so.unpack(), sl.unpack(),
                                                      contiguous(grads[0]), g, comm);
                       return std::vector<Tensor>{dq, select(dkv, 0, 0), select(dkv, 0, 1)};
                     });
  }
  return o;
}

// All-to-all over dim 0 of [cp·n, ...]: block j to rank j (differentiable).
Tensor all_to_all_rows(const Tensor& x, const dist::CommPtr& comm) {
  const std::vector<int64_t> counts(static_cast<size_t>(comm->size()), x.size(0) / comm->size());
  return all_to_all_v(x, counts, counts, comm);
}

// Ulysses (context_parallel.h).
Tensor ulysses_attention(const Tensor& q, Tensor k, Tensor v, double scale,
                         const dist::CommPtr& comm, const Tensor& segments) {
  const int64_t n = comm->size(), b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  if (hq % n != 0)
    HP_THROW(ValueError, "shard", "Ulysses (parallel.cp_method alltoall) splits the attention heads",
             " over cp: ", hq, " query heads (per tensor-parallel rank) do not divide by cp = ", n,
             "; use parallel.cp_method ring");
  if (k.size(1) % n != 0) {  // repeat kv heads to the query heads (GQA)
    const int64_t hkv = k.size(1), grp = hq / hkv;
    auto repeat = [&](const Tensor& x) {
      return reshape(expand(unsqueeze(x, 2), {b, hkv, grp, t, d}), {b, hq, t, d});
    };
    k = repeat(k);
    v = repeat(v);
  }
  const int64_t c = t / 2;
  // [B, H, T, D] sequence-sharded → [B, H/n, n·T, D] head-sharded, positions in natural order.
  auto to_heads = [&](const Tensor& x) {
    const int64_t h = x.size(1);
    Tensor blocks = transpose(reshape(x, {b, n, h / n, t, d}), 0, 1);  // [n, B, h/n, T, D]
    Tensor got = all_to_all_rows(reshape(contiguous(blocks), {n * b, h / n, t, d}), comm);
    got = reshape(got, {n, b, h / n, t, d});  // from rank s: its chunks s and 2n−1−s
    std::vector<Tensor> chunks;
    for (int64_t j = 0; j < 2 * n; ++j) {
      const int64_t s = j < n ? j : 2 * n - 1 - j;
      chunks.push_back(narrow(select(got, 0, s), 2, j < n ? 0 : c, c));
    }
    return cat(chunks, 2);
  };
  Tensor o =
      scaled_dot_product_attention(to_heads(q), to_heads(k), to_heads(v), true, scale, segments);
  // Back: rank s gets its chunks s and 2n−1−s of every head group.
  std::vector<Tensor> blocks;
  for (int64_t s = 0; s < n; ++s)
    blocks.push_back(unsqueeze(
        cat({narrow(o, 2, s * c, c), narrow(o, 2, (2 * n - 1 - s) * c, c)}, 2), 0));
  Tensor back = all_to_all_rows(reshape(cat(blocks, 0), {n * b, hq / n, t, d}), comm);
  return reshape(transpose(reshape(back, {n, b, hq / n, t, d}), 0, 1), {b, hq, t, d});
}

}  // namespace

Tensor context_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         ContextMethod method, const dist::CommPtr& cp, const Tensor& segments) {
  if (q.dim() != 4 || k.dim() != 4 || k.shape() != v.shape() || q.size(0) != k.size(0) ||
      q.size(2) != k.size(2) || q.size(3) != k.size(3) || q.size(1) % k.size(1) != 0)
    HP_THROW(ValueError, "shard", "context attention expects q [B, Hq, T, D], k = v [B, Hkv, T, D]",
             " with Hq divisible by Hkv; got q ", q.desc(), ", k ", k.desc(), ", v ", v.desc());
  if (segments.defined() &&
      (segments.dim() != 2 || segments.size(0) != q.size(0) ||
       segments.size(1) != q.size(2) * cp->size() || segments.dtype() != DType::i32))
    HP_THROW(ValueError, "shard", "context attention's segments must be the whole rows' i32 ",
             "document ids [B, T · cp] = [", q.size(0), ", ", q.size(2) * cp->size(), "], got ",
             segments.desc());
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(double(q.size(3)));
  if (cp->size() == 1) return scaled_dot_product_attention(q, k, v, true, s, segments);
  if (q.dtype() != DType::f32)
    return cast(context_attention(cast(q, DType::f32), cast(k, DType::f32), cast(v, DType::f32), s,
                                  method, cp, segments),
                q.dtype());
  return method == ContextMethod::ring ? ring_attention(q, k, v, float(s), cp, segments)
                                       : ulysses_attention(q, k, v, s, cp, segments);
}

RingStats ring_stats() {
  std::lock_guard<std::mutex> lock(stats_mu);
  return stats;
}

bool detail::ring_skip_communication(bool skip) { return skip_comm.exchange(skip); }

}  // namespace hp::parallel
