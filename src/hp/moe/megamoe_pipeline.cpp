// MegaMoE's exchange pipeline (megamoe_pipeline.h).
#include "hp/moe/megamoe_pipeline.h"

#include <algorithm>
#include <utility>

#include "hp/core/error.h"
#include "hp/kernels/cpu/gemm_plan.h"
#include "hp/ops/ops.h"
#include "hp/moe/expert_parallel.h"

namespace hp::moe::megamoe_detail {

using multicore::TaskContext;

namespace {

// The receive side of group g from the exchanged counts: by_expert [n · local], source s's rows of
// local expert e at s · local + e (exchange_counts' layout).
void receive_counts(const Layout& L, Group& g, const int64_t* by_expert) {
  const size_t n = size_t(L.n), ne = size_t(g.experts());
  g.recv.assign(n, 0);
  g.block_rows.assign(n * ne, 0);
  g.block_at.assign(n * ne, 0);
  g.regroup_at.assign(n * ne, 0);
  g.R = 0;
  for (size_t s = 0; s < n; ++s)
    for (size_t j = 0; j < ne; ++j) {
      const int64_t c = by_expert[s * size_t(L.local) + size_t(g.e_lo) + j];
      g.block_rows[s * ne + j] = c;
      g.block_at[s * ne + j] = g.R;
      g.recv[s] += c;
      g.R += c;
    }
  g.expert_at.assign(ne + 1, 0);
  for (size_t j = 0, at = 0; j < ne; ++j) {
    for (size_t s = 0; s < n; ++s) {
      g.regroup_at[s * ne + j] = int64_t(at);
      at += size_t(g.block_rows[s * ne + j]);
    }
    g.expert_at[j + 1] = int64_t(at);
  }
}

Shape rows_shape(int64_t rows, int64_t cols) {
  return {std::max<int64_t>(rows, 1), cols};
}

// Rows [src_row, +rows) of src → rows [dst_row, +rows) of dst, both [·, cols]: a byte copy in one
// dtype; bf16 → f32 widens (exact), f32 → bf16 rounds to nearest even (the kernels' converters,
// the bits of Tensor::to and so of the sequential path's casts).
void copy_rows(const TaskContext& ctx, BufferId src, int64_t src_row, BufferId dst, int64_t dst_row,
               int64_t rows, int64_t cols) {
  const Tensor &s = ctx.buffer(src), &d = ctx.buffer(dst);
  const char* from = static_cast<const char*>(s.raw_data()) + src_row * cols * int64_t(s.itemsize());
  char* to = static_cast<char*>(d.raw_data()) + dst_row * cols * int64_t(d.itemsize());
  if (s.dtype() == d.dtype()) {
    std::copy_n(from, rows * cols * int64_t(s.itemsize()), to);
  } else if (s.dtype() == DType::bf16 && d.dtype() == DType::f32) {
    kernels::detail::widen_bf16(reinterpret_cast<const uint16_t*>(from), cols, rows, cols,
                                reinterpret_cast<float*>(to));
  } else {
    HP_CHECK(s.dtype() == DType::f32 && d.dtype() == DType::bf16, "rows ", s.desc(), " to ",
             d.desc());
    kernels::detail::narrow_bf16(reinterpret_cast<const float*>(from), rows, cols,
                                 reinterpret_cast<uint16_t*>(to), cols);
  }
}

}  // namespace

Layout make_layout(const std::vector<int64_t>& count, int64_t num_experts, int64_t n, int64_t rank,
                   int64_t groups, int64_t hidden, int64_t inter, DType dtype, DType compute) {
  Layout L;
  L.dtype = dtype;
  L.compute = compute;
  L.n = n;
  L.rank = rank;
  L.hidden = hidden;
  L.inter = inter;
  L.local = local_experts(num_experts, n, rank).count;
  const int64_t chunk = (num_experts + n - 1) / n;
  const int64_t slots = (chunk + groups - 1) / groups;
  std::vector<int64_t> offset(size_t(num_experts) + 1, 0);  // [E + 1] rows of xs before expert e
  for (int64_t e = 0; e < num_experts; ++e)
    offset[size_t(e) + 1] = offset[size_t(e)] + count[size_t(e)];
  L.rows = offset.back();
  for (int64_t lo = 0; lo < chunk; lo += slots) {
    const int64_t hi = std::min(chunk, lo + slots);
    Group g;
    g.e_lo = std::min(lo, L.local);
    g.e_hi = std::min(hi, L.local);
    g.send.assign(size_t(n), 0);
    g.send_at.assign(size_t(n), 0);
    g.home.assign(size_t(n), 0);
    for (int64_t r = 0; r < n; ++r) {  // owner r's experts in slots [lo, hi): contiguous in xs
      const ExpertRange own = local_experts(num_experts, n, r);
      const int64_t a = own.first + std::min(lo, own.count),
                    b = own.first + std::min(hi, own.count);
      g.home[size_t(r)] = offset[size_t(a)];
      g.send[size_t(r)] = offset[size_t(b)] - offset[size_t(a)];
      g.send_at[size_t(r)] = g.S;
      g.S += g.send[size_t(r)];
    }
    L.groups.push_back(std::move(g));
  }
  return L;
}

// (Appended, not "a" + to_string: GCC 12's -Wrestrict misfires on that.)
std::string suffix(int64_t g) {
  std::string s(" ");
  s += std::to_string(g);
  return s;
}

Tensor rows_of(int64_t rows, int64_t cols, DType dtype) {
  return empty({std::max<int64_t>(rows, 1), cols}, dtype);
}

namespace {

// Group g's buffers and events in the plan (rows [·, H] in L.dtype unless said otherwise): send
// [S, H] and back [S, H] (this rank's rows out and home), recv [R, H] and y send [R, H] (the
// owner's side), the compute's buffers b (L.compute), and the events of its chain.
struct GroupIds {
  BufferId send, recv, ysend, back;
  GroupBuffers b;
  EventId routed, laid_out, dispatched, regrouped, unregrouped, combined, placed;
};

// Source s's rows of each expert between the received order and the regrouped one (one block
// per source): to_regrouped copies recv → x, else y → y send, converting between the rows' and
// the compute's dtypes (bf16 rows of f32 experts: widened here, each output row rounded here
// where the sequential path casts y).
multicore::VectorFn regroup_rows(Layout* lp, int64_t H, size_t gi, bool to_regrouped, BufferId from,
                                 BufferId to) {
  return
      [lp, H, gi, to_regrouped, from, to](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
        const Group& g = lp->groups[gi];
        const size_t ne = size_t(g.experts());
        for (size_t s = size_t(b); s < size_t(e); ++s)
          for (size_t j = 0; j < ne; ++j) {
            const size_t k = s * ne + j;
            const int64_t src = to_regrouped ? g.block_at[k] : g.regroup_at[k];
            const int64_t dst = to_regrouped ? g.regroup_at[k] : g.block_at[k];
            copy_rows(ctx, from, src, to, dst, g.block_rows[k], H);
          }
      };
}

// add_pipeline's tasks, added in its order: every group's buffers and events, the count exchange,
// every group's route and layout, then group by group the exchange chain (dispatch posted one
// group ahead, regroup, compute, unregroup, combine, place one group behind).
class PipelineBuilder {
 public:
  PipelineBuilder(Plan& plan, Layout& L, const dist::CommPtr& comm, BufferId in, BufferId out,
                  const std::vector<RowBuffer>& extra)
      : plan_(plan),
        layout_(L),
        comm_(comm),
        in_(in),
        out_(out),
        extra_(extra),
        row_bytes_(L.hidden * int64_t(dtype_size(L.dtype))) {}

  void add_group_ids() {
    const Layout& L = layout_;
    const int64_t H = L.hidden, G = int64_t(L.groups.size());
    const DType dt = L.dtype, ct = L.compute;
    ids_.resize(L.groups.size());
    for (int64_t gi = 0; gi < G; ++gi) {
      const Group& g = L.groups[size_t(gi)];
      const std::string s = suffix(int64_t(gi));
      GroupIds& d = ids_[size_t(gi)];
      d.send = plan_.add_buffer("send" + s, rows_of(g.S, H, dt));
      d.recv = plan_.add_dynamic_buffer("recv" + s, dt);
      d.b.x = plan_.add_dynamic_buffer("x" + s, ct);
      d.b.y = plan_.add_dynamic_buffer("y" + s, ct);
      for (const RowBuffer& r : extra_)
        d.b.rows.push_back(plan_.add_dynamic_buffer(r.name + s, ct));
      d.ysend = plan_.add_dynamic_buffer("y send" + s, dt);
      d.back = plan_.add_buffer("back" + s, rows_of(g.S, H, dt));
      d.routed = plan_.add_event("routed" + s);
      d.laid_out = plan_.add_event("laid out" + s);
      d.dispatched = plan_.add_event("dispatched" + s);
      d.regrouped = plan_.add_event("regrouped" + s);
      d.unregrouped = plan_.add_event("unregrouped" + s);
      d.combined = plan_.add_event("combined" + s);
      d.placed = plan_.add_event("placed" + s);
    }
  }

  // The counts first: this rank's count of every expert to its owner, n · local arrive (block s:
  // source s's counts of this rank's experts). Posted at once; the routes run meanwhile.
  void add_count_exchange(BufferId count) {
    const Layout& L = layout_;
    const int64_t E = plan_.buffer(count).numel();
    received_ = plan_.add_buffer("received counts",
                                 empty({std::max<int64_t>(L.n * L.local, 1)}, DType::i64));
    counted_ = plan_.add_event("counted");
    const std::vector<int64_t> split = experts_per_rank(E, L.n), mine(size_t(L.n), L.local);
    auto post = [comm = comm_, count, split, mine](const TaskContext& ctx) {
      return comm->iall_to_all_v(ctx.buffer(count), split, mine);
    };
    plan_.add_comm(
        "counts", {count}, {},
        {.post = post, .result_into = received_, .bytes = (E - L.local) * int64_t(sizeof(int64_t))},
        {{}, counted_});
  }

  // route g: owner r's rows home[r] of `in` → send rows [send_at[r], +send[r]); one block per
  // owner.
  void add_routes() {
    Layout* lp = &layout_;
    const int64_t H = layout_.hidden;
    for (int64_t gi = 0; gi < int64_t(ids_.size()); ++gi) {
      const GroupIds& d = ids_[size_t(gi)];
      plan_.add_vector(
          "route " + std::to_string(gi), {in_}, {d.send}, layout_.n, 1,
          [lp, gi, in = in_, d, H](const TaskContext& ctx, int64_t, int64_t b, int64_t e) {
            const Group& g = lp->groups[size_t(gi)];
            for (int64_t r = b; r < e; ++r)
              copy_rows(ctx, in, g.home[size_t(r)], d.send, g.send_at[size_t(r)], g.send[size_t(r)],
                        H);
          },
          {{}, d.routed});
    }
  }

  // layout g: group g's receive side and its [R, ·] buffers (their shapes depend on the counts).
  void add_layouts() {
    Layout* lp = &layout_;
    const int64_t H = layout_.hidden;
    const BufferId received = received_;
    for (int64_t gi = 0; gi < int64_t(ids_.size()); ++gi) {
      const GroupIds& d = ids_[size_t(gi)];
      std::vector<BufferId> sized{d.recv, d.b.x, d.b.y, d.ysend};
      std::vector<int64_t> cols{H, H, H, H};
      for (size_t i = 0; i < extra_.size(); ++i) {
        sized.push_back(d.b.rows[i]);
        cols.push_back(extra_[i].cols);
      }
      std::vector<BufferId> reads;
      std::vector<multicore::Wait> waits;
      if (received != multicore::kNoBuffer) {
        reads.push_back(received);
        waits.push_back({counted_, 1});
      }
      plan_.add_vector("layout" + suffix(gi), reads, sized,
                       [lp, gi, received, sized, cols](const TaskContext& ctx) {
                         Group& g = lp->groups[size_t(gi)];
                         if (received != multicore::kNoBuffer)
                           receive_counts(*lp, g, ctx.data<int64_t>(received));
                         for (size_t i = 0; i < sized.size(); ++i)
                           ctx.allocate(sized[i], rows_shape(g.R, cols[i]));
                       },
                       {waits, d.laid_out});
    }
  }

  // Group by group: the next group's dispatch is posted before this group's compute, and the
  // previous group's place after this group's combine (place tasks chain: they share `out`).
  void add_exchanges(const Compute& compute, const AfterCombine& after) {
    const int64_t G = int64_t(ids_.size());
    if (G > 0) add_dispatch(0);
    for (int64_t gi = 0; gi < G; ++gi) {
      if (gi + 1 < G) add_dispatch(gi + 1);
      add_experts(gi, compute);
      add_combine(gi);
      if (after) after(plan_, size_t(gi));
      if (gi > 0) add_place(gi - 1);
    }
    if (G > 0) add_place(G - 1);
  }

  std::vector<GroupBuffers> group_buffers() const {
    std::vector<GroupBuffers> out_ids;
    for (const GroupIds& d : ids_) out_ids.push_back(d.b);
    return out_ids;
  }

 private:
  // dispatch g: send [S, H] → recv [R, H], once routed and the receive side is known.
  void add_dispatch(int64_t gi) {
    const GroupIds& d = ids_[size_t(gi)];
    const Group& g = layout_.groups[size_t(gi)];
    const BufferId send = d.send;
    auto post = [comm = comm_, send, lp = &layout_, gi](const TaskContext& ctx) {
      const Group& gg = lp->groups[size_t(gi)];
      return comm->iall_to_all_v(narrow(ctx.buffer(send), 0, 0, gg.S), gg.send, gg.recv);
    };
    plan_.add_comm("dispatch " + std::to_string(gi), {d.send}, {},
                   {.post = post,
                    .result_into = d.recv,
                    .bytes = (g.S - g.send[size_t(layout_.rank)]) * row_bytes_},
                   {{{d.routed, 1}, {d.laid_out, 1}}, d.dispatched});
  }

  // regroup g (recv → x by expert), the caller's compute (x → y), unregroup g (y → y send).
  void add_experts(int64_t gi, const Compute& compute) {
    const GroupIds& d = ids_[size_t(gi)];
    const std::string s = suffix(int64_t(gi));
    Layout* lp = &layout_;
    const int64_t H = layout_.hidden;
    plan_.add_vector("regroup" + s, {d.recv}, {d.b.x}, layout_.n, 1,
                     regroup_rows(lp, H, size_t(gi), true, d.recv, d.b.x),
                     {{{d.dispatched, 1}}, d.regrouped});
    const EventId computed = compute(plan_, size_t(gi), d.b, d.regrouped);
    plan_.add_vector("unregroup" + s, {d.b.y}, {d.ysend}, layout_.n, 1,
                     regroup_rows(lp, H, size_t(gi), false, d.b.y, d.ysend),
                     {{{computed, 1}}, d.unregrouped});
  }

  // combine g: y send [R, H] → back [S, H], the dispatch reversed; its bytes known at run time.
  void add_combine(int64_t gi) {
    const GroupIds& d = ids_[size_t(gi)];
    const BufferId ysend = d.ysend;
    const int64_t rank = layout_.rank, row_bytes = row_bytes_;
    Layout* lp = &layout_;
    auto post = [comm = comm_, ysend, lp, gi](const TaskContext& ctx) {
      const Group& gg = lp->groups[size_t(gi)];
      return comm->iall_to_all_v(narrow(ctx.buffer(ysend), 0, 0, gg.R), gg.recv, gg.send);
    };
    auto bytes = [lp, gi, rank, row_bytes](const TaskContext&) {
      const Group& gg = lp->groups[size_t(gi)];
      return (gg.R - gg.recv[size_t(rank)]) * row_bytes;
    };
    plan_.add_comm("combine" + suffix(int64_t(gi)), {d.ysend}, {},
                   {.post = post, .result_into = d.back, .bytes_fn = bytes},
                   {{{d.unregrouped, 1}}, d.combined});
  }

  // place g: back rows → `out` at the rows they left; chained (one `out`).
  void add_place(int64_t gi) {
    const GroupIds& d = ids_[size_t(gi)];
    std::vector<multicore::Wait> waits{{d.combined, 1}};
    if (gi > 0) waits.push_back({ids_[size_t(gi - 1)].placed, 1});
    const int64_t H = layout_.hidden;
    plan_.add_vector("place " + std::to_string(gi), {d.back}, {out_}, layout_.n, 1,
                     [lp = &layout_, gi, out = out_, d, H](const TaskContext& ctx, int64_t,
                                                           int64_t b, int64_t e) {
                       const Group& g = lp->groups[size_t(gi)];
                       for (int64_t r = b; r < e; ++r)
                         copy_rows(ctx, d.back, g.send_at[size_t(r)], out, g.home[size_t(r)],
                                   g.send[size_t(r)], H);
                     },
                     {waits, d.placed});
  }

  Plan& plan_;
  Layout& layout_;
  const dist::CommPtr& comm_;
  const BufferId in_, out_;
  const std::vector<RowBuffer>& extra_;
  const int64_t row_bytes_;                   // one [H] row on the wire
  std::vector<GroupIds> ids_;                 // [groups]
  EventId counted_ = multicore::kNoEvent;     // the counts arrived (none: kNoEvent)
  BufferId received_ = multicore::kNoBuffer;  // [n · local] the counts received
};

}  // namespace

std::vector<GroupBuffers> add_pipeline(Plan& plan, Layout& L, const dist::CommPtr& comm,
                                       BufferId count, BufferId in, BufferId out,
                                       const std::vector<RowBuffer>& extra, const Compute& compute,
                                       const AfterCombine& after) {
  PipelineBuilder builder(plan, L, comm, in, out, extra);
  builder.add_group_ids();
  if (count != multicore::kNoBuffer) builder.add_count_exchange(count);
  builder.add_routes();
  builder.add_layouts();
  builder.add_exchanges(compute, after);
  return builder.group_buffers();
}

}  // namespace hp::moe::megamoe_detail
