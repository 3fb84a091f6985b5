#include "hp/shard/dtensor.h"

#include "hp/autograd/node.h"
#include "hp/ops/ops.h"

namespace hp::shard {

std::string placement_str(const Placement& p) {
  if (is_shard(p)) return "Shard(" + std::to_string(std::get<Shard>(p).dim) + ")";
  if (is_replicate(p)) return "Replicate()";
  return std::string("Partial(") + dist::reduce_op_name(std::get<Partial>(p).op) + ")";
}

std::string placements_str(const Placements& p) {
  std::string s = "(";
  for (size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + placement_str(p[i]);
  return s + ")";
}

namespace detail {
void check_placements(const DeviceMesh& mesh, const Placements& p, int64_t ndim, bool nested) {
  if (static_cast<int64_t>(p.size()) != mesh.ndim())
    HP_THROW(ValueError, "dtensor", "placements ", placements_str(p), " have ", p.size(),
             " entries but ", mesh.str(), " has ", mesh.ndim(), " axes");
  for (size_t a = 0; a < p.size(); ++a) {
    if (!is_shard(p[a])) continue;
    int64_t d = std::get<Shard>(p[a]).dim;
    if (d < 0 || d >= ndim)
      HP_THROW(ValueError, "dtensor", "placement Shard(", d, ") on mesh axis '",
               mesh.axis_names()[a], "' names a missing dim: the tensor has ", ndim, " dims");
    for (size_t b = a + 1; b < p.size() && !nested; ++b)
      if (p[b] == p[a])
        HP_THROW(ValueError, "dtensor", "placements ", placements_str(p), " shard dim ", d,
                 " on two mesh axes ('", mesh.axis_names()[a], "', '", mesh.axis_names()[b],
                 "'): such a layout describes a shard but cannot be redistributed");
  }
}
}  // namespace detail

namespace {
// This rank's [offset, length) on every dim: axes sharding the same dim split it from the
// innermost axis outward, each splitting the piece the axes after it left (dtensor.h).
std::pair<Shape, Shape> local_box(const Shape& global, const DeviceMesh& mesh,
                                  const Placements& p) {
  Shape off(global.size(), 0), len = global;
  for (size_t a = p.size(); a-- > 0;)
    if (is_shard(p[a])) {
      auto d = static_cast<size_t>(std::get<Shard>(p[a]).dim);
      const ChunkRange r = chunk_range(len[d], mesh.size(static_cast<int64_t>(a)),
                                       mesh.coordinate(static_cast<int64_t>(a)));
      off[d] += r.start;
      len[d] = r.length;
    }
  return {off, len};
}
}  // namespace

Shape local_offsets(const Shape& global, const DeviceMesh& mesh, const Placements& p) {
  return local_box(global, mesh, p).first;
}

Shape local_shape(const Shape& global, const DeviceMesh& mesh, const Placements& p) {
  return local_box(global, mesh, p).second;
}

Shape DTensor::offsets() const {
  return local_offsets(global_, *mesh_, placements_);
}

DTensor DTensor::from_local(const Tensor& local, MeshPtr mesh, Placements placements,
                            Shape global) {
  HP_CHECK(mesh != nullptr);
  detail::check_placements(*mesh, placements, local.dim(), /*nested=*/true);
  dist::Communicator& c = *mesh->comm();
  if (global.empty() && local.dim() > 0) {
    global = local.shape();
    for (size_t a = 0; a < placements.size(); ++a)
      if (is_shard(placements[a])) {
        auto d = static_cast<size_t>(std::get<Shard>(placements[a]).dim);
        Tensor n = from_data<int64_t>({global[d]}, {1});
        global[d] =
            static_cast<int64_t>(mesh->axis_comm(static_cast<int64_t>(a))->all_reduce(n).item());
      }
  }
  // Every rank must agree on the global shape: compare ndim, then each dim's min and max.
  auto agree = [&](const Shape& v) {
    Tensor t = from_data<int64_t>(v, {static_cast<int64_t>(v.size())});
    return c.all_reduce(t, dist::ReduceOp::max).to_vector() ==
           c.all_reduce(t, dist::ReduceOp::min).to_vector();
  };
  if (!agree({static_cast<int64_t>(global.size())}) || (!global.empty() && !agree(global)))
    HP_THROW(ValueError, "dtensor", "global shapes differ across ranks (rank ", c.rank(), " has ",
             shape_str(global), ") for placements ", placements_str(placements));
  Shape want = local_shape(global, *mesh, placements);
  int32_t bad = local.shape() != want ? 1 : 0;
  Tensor flags = c.all_gather(from_data<int32_t>({bad}, {1}));
  for (int r = 0; r < c.size(); ++r)
    if (flags.data<int32_t>()[r])
      HP_THROW(ValueError, "dtensor", "rank ", r, "'s local shape does not fit global shape ",
               shape_str(global), " under ", placements_str(placements), " on ", mesh->str(),
               r == c.rank()
                   ? " (it is " + shape_str(local.shape()) + ", expected " + shape_str(want) + ")"
                   : std::string());
  DTensor t;
  t.local_ = local;
  t.global_ = global;
  t.mesh_ = std::move(mesh);
  t.placements_ = std::move(placements);
  return t;
}

DTensor DTensor::redistribute(const Placements& dst,
                              const std::optional<Placements>& grad_placements) const {
  detail::check_placements(*mesh_, placements_, static_cast<int64_t>(global_.size()));
  detail::check_placements(*mesh_, dst, static_cast<int64_t>(global_.size()));
  if (grad_placements)
    detail::check_placements(*mesh_, *grad_placements, static_cast<int64_t>(global_.size()));
  DTensor out = *this;
  out.placements_ = dst;
  // The gradient layouts of the output and of the input (see dtensor.h).
  Placements g_out = dst, g_in = placements_;
  for (size_t a = 0; a < dst.size(); ++a) {
    if (is_replicate(dst[a]) && is_shard(placements_[a])) g_out[a] = Partial{};
    if (is_partial(dst[a])) g_out[a] = Replicate{};
    if (is_partial(g_in[a])) g_in[a] = Replicate{};
  }
  if (grad_placements) g_out = *grad_placements;
  // Same layout: nothing to do unless the gradient needs converting (e.g. Replicate with a
  // Partial gradient: identity forward, all-reduce backward — Megatron's "f").
  if (dst == placements_ && g_out == g_in) return out;
  Tensor y = dst == placements_
                 ? local_
                 : detail::redistribute_local(local_, global_, *mesh_, placements_, dst);
  if (y.same(local_) || y.requires_grad()) y = y.detach();
  MeshPtr mesh = mesh_;
  Shape global = global_;
  autograd::record("Redistribute", {local_}, {y},
                   [mesh, global, g_out, g_in](const std::vector<Tensor>& grads) {
                     return std::vector<Tensor>{
                         detail::redistribute_local(grads[0], global, *mesh, g_out, g_in)};
                   });
  out.local_ = y;
  return out;
}

Tensor DTensor::full_tensor() const {
  Placements all(placements_.size(), Replicate{});
  return redistribute(all, all).local();
}

DTensor distribute_tensor(const Tensor& full, MeshPtr mesh, Placements placements) {
  Placements all(static_cast<size_t>(mesh->ndim()), Replicate{});
  return DTensor::from_local(full, std::move(mesh), all, full.shape()).redistribute(placements);
}

namespace {
// Draws this rank's block of a global random tensor: each local row (last dim) starts at global
// element g; drawing from the 4-aligned element a ≤ g keeps Philox's (block, lane) = (i/4, i%4).
template <class Fill>
DTensor sharded_draw(const Shape& global, MeshPtr mesh, Placements placements, DType dt,
                     Generator& gen, const Fill& fill) {
  detail::check_placements(*mesh, placements, static_cast<int64_t>(global.size()));
  for (const auto& p : placements)
    if (is_partial(p))
      HP_THROW(ValueError, "dtensor", "random init needs Shard or Replicate placements, got ",
               placements_str(placements));
  RngState base = gen.state();
  gen.reserve(shape_numel(global));
  Shape ls = local_shape(global, *mesh, placements), off = local_offsets(global, *mesh, placements);
  Tensor out = empty(ls, DType::f32);
  const int64_t nd = static_cast<int64_t>(global.size());
  const int64_t row = nd ? ls.back() : 1, rows = row ? out.numel() / row : 0;
  Shape gstrides = contiguous_strides(global);
  std::vector<float> buf;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t g = 0, rest = r;
    for (int64_t d = nd - 1; d >= 0; --d) {
      int64_t size = d == nd - 1 ? 1 : ls[static_cast<size_t>(d)];
      int64_t idx = d == nd - 1 ? 0 : rest % size;
      if (d != nd - 1) rest /= size;
      g += (idx + off[static_cast<size_t>(d)]) * gstrides[static_cast<size_t>(d)];
    }
    int64_t a = g & ~int64_t{3};
    buf.resize(static_cast<size_t>(row + g - a));
    fill(buf.data(), static_cast<int64_t>(buf.size()),
         RngState{base.seed, base.offset + static_cast<uint64_t>(a / 4)});
    std::copy(buf.begin() + (g - a), buf.end(), out.data<float>() + r * row);
  }
  return DTensor::from_local(dt == DType::f32 ? out : out.to(dt), std::move(mesh),
                             std::move(placements), global);
}
}  // namespace

DTensor dtensor_randn(const Shape& global, MeshPtr mesh, Placements placements, DType dt,
                      double mean, double std, Generator& gen) {
  return sharded_draw(global, std::move(mesh), std::move(placements), dt, gen,
                      [&](float* p, int64_t n, RngState at) {
                        fill_normal(p, n, at, static_cast<float>(mean), static_cast<float>(std));
                      });
}

DTensor dtensor_rand(const Shape& global, MeshPtr mesh, Placements placements, DType dt, double lo,
                     double hi, Generator& gen) {
  return sharded_draw(global, std::move(mesh), std::move(placements), dt, gen,
                      [&](float* p, int64_t n, RngState at) {
                        fill_uniform(p, n, at, static_cast<float>(lo), static_cast<float>(hi));
                      });
}

}  // namespace hp::shard
