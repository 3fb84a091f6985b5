#include "hp/fsdp/fsdp.h"

#include <any>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "hp/autograd/engine.h"
#include "hp/autograd/grad_mode.h"
#include "hp/core/allocator.h"
#include "hp/autograd/node.h"
#include "hp/core/tensor_data.h"
#include "hp/fsdp/flat_group.h"
#include "hp/fsdp/reducer.h"
#include "hp/nn/module.h"

namespace hp::fsdp {

using detail::Clock;
using detail::FlatGroup;
using detail::FlatParam;

namespace {

std::string join_fqn(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Calls f(fqn, module) for root and every descendant, depth first; f returns false to skip a
// module's descendants.
template <class F>
void walk_modules(nn::Module& m, const std::string& fqn, F&& f) {
  if (!f(fqn, m)) return;
  for (const auto& [name, child] : m.children()) walk_modules(*child, join_fqn(fqn, name), f);
}

bool reducible(DType dt) {
  return dt == DType::f32 || dt == DType::bf16 || dt == DType::f16;
}

// A tensor saved for backward that views a group's gathered parameter: kept as the view's
// geometry only, so freeing the parameter after forward frees its memory; backward rebuilds the
// view on the re-gathered data.
struct SavedParamView {
  size_t group, param;
  Shape shape, strides;
  int64_t offset;
};

}  // namespace

class FsdpModel::Impl : public std::enable_shared_from_this<FsdpModel::Impl> {
 public:
  enum class State { sharded, gathering, unsharded };
  struct Group {
    Group(std::string n, bool r, FlatGroup f, dist::CommPtr c)
        : name(std::move(n)), root(r), flat(std::move(f)), comm(std::move(c)) {}
    std::string name;  // FQN prefix, or "root"
    bool root;
    FlatGroup flat;
    dist::CommPtr comm;            // the ranks it is sharded over; null for a world of one
    nn::Module* module = nullptr;  // null for the root
    size_t unit = 0;               // index into units_ (not for the root)
    State state = State::sharded;
    dist::WorkPtr gather;
    Clock::time_point issued;
    // Gathered storage → parameter index (saved-tensor packing).
    std::unordered_map<const Storage*, size_t> by_storage;
    // This backward: which parameters' gradients are accumulated; whether the group takes part.
    std::vector<bool> got_grad;
    size_t num_grads = 0;
    bool in_backward = false;
  };

  Impl(nn::Module& root, Groups groups, dist::CommPtr shard, dist::CommPtr replicate,
       FsdpOptions opt);
  ~Impl();
  void install();

  // (FQN, module shape, first global row, f32 master shard) per parameter.
  struct Shard {
    std::string fqn;
    Shape global_shape;
    int64_t row_offset = 0;
    Tensor master;
  };
  std::vector<Shard> shards() const;
  // The shard communicator of each parameter's group (null: a world of one), in shards() order.
  std::vector<dist::CommPtr> shard_comms() const;
  const dist::CommPtr& single_comm() const { return single_; }
  void finish_grads();
  void reshard_all();
  Stats stats() const { return stats_; }
  bool passthrough() const { return passthrough_; }

 private:
  Tensor unit_forward(size_t u, const Tensor& x, const nn::Module::ForwardFn& inner);
  void ensure_root();
  // Gathers unit u's groups (waiting for them) after issuing the prefetch of unit `next` (if any).
  void unshard_unit(size_t u, std::optional<size_t> next);
  void issue_gather(Group& G);
  void complete_gather(Group& G);
  void reshard_group(Group& G);
  autograd::SavedTensorHooks saved_hooks();
  Tensor attach_pre_backward(size_t u, const Tensor& y);
  void pre_backward(size_t u);
  void on_grad(size_t g, size_t i);
  void post_backward(size_t g);
  void note_backward();
  void end_backward();
  // post_backward of every group that took part in a backward since its last reduction.
  void reduce_in_backward();

  nn::Module& root_;
  Groups group_modules_;
  dist::CommPtr shard_, replicate_;  // shard_ null for a world of one, replicate_ without HSDP
  // The shard communicator as given when it has one rank: the mesh of a world of one, made without
  // a collective over the world (which ranks of other pipeline stages would not join).
  dist::CommPtr single_;
  FsdpOptions opt_;
  bool passthrough_ = false;
  std::vector<std::pair<std::string, Tensor>> params_;  // root order, tied tensors once
  std::vector<std::unique_ptr<Group>> groups_;          // forward order, then the root
  // Units: the groups one module's forward gathers together, in forward order.
  std::vector<std::vector<size_t>> units_;
  std::optional<size_t> root_group_;
  std::vector<std::pair<size_t, size_t>> where_;  // params_[k] → (group, index in it)
  std::vector<uint64_t> hook_ids_;
  bool callback_queued_ = false;
  Stats stats_;
  std::unique_ptr<detail::Reducer> reducer_;
};

FsdpModel::Impl::Impl(nn::Module& root, Groups groups, dist::CommPtr shard, dist::CommPtr replicate,
                      FsdpOptions opt)
    : root_(root), group_modules_(std::move(groups)), opt_(opt) {
  if (!reducible(opt_.param_dtype) || !reducible(opt_.reduce_dtype))
    HP_THROW(ValueError, "fsdp", "param_dtype (", dtype_name(opt_.param_dtype),
             ") and reduce_dtype (", dtype_name(opt_.reduce_dtype), ") must be f32, bf16 or f16");
  // A communicator of one rank is a world of one (null).
  auto multi = [](dist::CommPtr c) { return c && c->size() > 1 ? c : nullptr; };
  if (shard && shard->size() == 1) single_ = shard;
  shard_ = multi(std::move(shard));
  replicate_ = multi(std::move(replicate));
  std::vector<dist::CommPtr> comms;  // per group spec
  bool any_shard = shard_ != nullptr;
  for (auto& spec : group_modules_) {
    if (!spec.module) HP_THROW(ValueError, "fsdp", "group '", spec.prefix, "': null module");
    comms.push_back(spec.shard_comm ? multi(spec.shard_comm) : shard_);
    any_shard |= comms.back() != nullptr;
  }
  passthrough_ = !any_shard && !replicate_ && opt_.param_dtype == DType::f32 &&
                 opt_.master_tier == MemTier::device && opt_.grad_tier == MemTier::device;

  // Root parameters, each tensor once; owner group per parameter (-1: the root group).
  std::unordered_map<const hp::detail::TensorImpl*, size_t> index_of;
  std::map<std::string, size_t> by_fqn;
  for (auto& [fqn, t] : root_.named_parameters()) {
    if (index_of.count(t.impl())) continue;
    if (t.dtype() != DType::f32)
      HP_THROW(ValueError, "fsdp", fqn, ": parameters must be f32 master weights, got ", t.desc());
    if (t.dim() == 0 && !passthrough_)
      HP_THROW(ValueError, "fsdp", fqn, ": a 0-d parameter cannot be sharded on dim 0");
    index_of[t.impl()] = params_.size();
    by_fqn[fqn] = params_.size();
    params_.emplace_back(fqn, t);
  }
  // Groups with globs claim first, then the others take what is left of their modules.
  std::vector<int64_t> owner(params_.size(), -1);
  for (bool with_globs : {true, false})
    for (size_t k = 0; k < group_modules_.size(); ++k) {
      const fsdp::Group& spec = group_modules_[k];
      if (spec.params.empty() == with_globs) continue;
      std::vector<bool> glob_used(spec.params.size(), false);
      for (auto& [name, t] : spec.module->named_parameters()) {
        const std::string fqn = join_fqn(spec.prefix, name);
        auto it = by_fqn.find(fqn);
        if (it == by_fqn.end() || !params_[it->second].second.same(t))
          HP_THROW(ValueError, "fsdp", "group '", spec.prefix, "': root has no parameter '", fqn,
                   "' that is this module's '", name, "' (wrong prefix, or not under the root?)");
        int64_t& o = owner[it->second];
        if (with_globs) {
          bool match = false;
          for (size_t q = 0; q < spec.params.size(); ++q)
            if (nn::glob_match(spec.params[q], name)) match = glob_used[q] = true;
          if (!match) continue;
        } else if (o >= 0 && !group_modules_[size_t(o)].params.empty()) {
          continue;  // claimed by a group with globs
        }
        if (o >= 0 && o != static_cast<int64_t>(k))
          HP_THROW(ValueError, "fsdp", "'", fqn, "' belongs to groups '",
                   group_modules_[static_cast<size_t>(o)].prefix, "' and '", spec.prefix,
                   "' (nested groups?)");
        o = static_cast<int64_t>(k);
      }
      for (size_t q = 0; q < spec.params.size(); ++q)
        if (!glob_used[q])
          HP_THROW(ValueError, "fsdp", "group '", spec.prefix, "': parameter glob '",
                   spec.params[q], "' matches nothing");
    }
  if (passthrough_) return;

  where_.resize(params_.size());
  std::map<const nn::Module*, size_t> unit_of;
  auto add_group = [&](int64_t k, const std::string& name, dist::CommPtr comm) {
    std::vector<std::pair<std::string, Tensor>> members;
    std::vector<size_t> ids;
    for (size_t i = 0; i < params_.size(); ++i)
      if (owner[i] == k) {
        members.push_back(params_[i]);
        ids.push_back(i);
      }
    if (members.empty()) return;  // nothing to gather: no wrapper, no collectives
    for (size_t j = 0; j < ids.size(); ++j) where_[ids[j]] = {groups_.size(), j};
    const int64_t world = comm ? comm->size() : 1, rank = comm ? comm->rank() : 0;
    auto G = std::make_unique<Group>(name, k < 0, FlatGroup(members, world, rank, opt_.master_tier, opt_.grad_tier), std::move(comm));
    if (k >= 0) {
      G->module = group_modules_[static_cast<size_t>(k)].module;
      auto [it, fresh] = unit_of.emplace(G->module, units_.size());
      if (fresh) units_.emplace_back();
      G->unit = it->second;
      units_[G->unit].push_back(groups_.size());
    }
    G->got_grad.assign(members.size(), false);
    // The module's tensors now show param_dtype data only while gathered; the f32 originals go.
    G->flat.release(opt_.param_dtype);
    for (auto& p : G->flat.params()) p.handle.zero_grad();
    groups_.push_back(std::move(G));
  };
  for (size_t k = 0; k < group_modules_.size(); ++k)
    add_group(static_cast<int64_t>(k), group_modules_[k].prefix, comms[k]);
  add_group(-1, "root", shard_);
  if (!groups_.empty() && groups_.back()->root) root_group_ = groups_.size() - 1;
  reducer_ = std::make_unique<detail::Reducer>(replicate_, stats_);
}

FsdpModel::Impl::~Impl() {
  for (uint64_t id : hook_ids_) autograd::remove_post_accumulate_grad_hook(id);
  // Collectives read and write their buffers until complete.
  try {
    if (reducer_) reducer_->drain();
    for (auto& G : groups_)
      if (G->gather) G->gather->wait();
  } catch (const std::exception&) {  // a destructor must not throw; the job is failing anyway
  }
}

void FsdpModel::Impl::install() {
  if (passthrough_) return;
  std::weak_ptr<Impl> weak = weak_from_this();
  std::set<const nn::Module*> group_set;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Group& G = *groups_[g];
    for (size_t i = 0; i < G.flat.params().size(); ++i)
      hook_ids_.push_back(autograd::register_post_accumulate_grad_hook(
          G.flat.params()[i].handle, [weak, g, i](const Tensor&) {
            if (auto self = weak.lock()) self->on_grad(g, i);
          }));
    if (G.root) continue;
    group_set.insert(G.module);
  }
  for (size_t u = 0; u < units_.size(); ++u)
    groups_[units_[u].front()]->module->add_forward_wrapper(
        [weak, u](const Tensor& x, const nn::Module::ForwardFn& inner) {
          auto self = weak.lock();
          return self ? self->unit_forward(u, x, inner) : inner(x);
        });
  if (!root_group_) return;
  // Modules that own root parameters gather the root before they run (it stays gathered).
  std::set<std::string> root_fqns;
  for (const auto& p : groups_[*root_group_]->flat.params()) root_fqns.insert(p.fqn);
  walk_modules(root_, "", [&](const std::string& fqn, nn::Module& m) {
    if (group_set.count(&m)) return false;
    for (auto& [name, t] : m.named_parameters())
      if (name.find('.') == std::string::npos && root_fqns.count(join_fqn(fqn, name))) {
        m.add_forward_wrapper([weak](const Tensor& x, const nn::Module::ForwardFn& inner) {
          if (auto self = weak.lock()) self->ensure_root();
          return inner(x);
        });
        break;
      }
    return true;
  });
}

// ---------------------------------------------------------------- forward

Tensor FsdpModel::Impl::unit_forward(size_t u, const Tensor& x,
                                     const nn::Module::ForwardFn& inner) {
  ensure_root();
  std::optional<size_t> next;
  if (u + 1 < units_.size()) next = u + 1;
  unshard_unit(u, next);
  const bool free_after = opt_.reshard_after_forward;
  Tensor y;
  {
    std::optional<autograd::SavedTensorHooksGuard> guard;
    if (free_after && autograd::grad_enabled()) guard.emplace(saved_hooks());
    y = inner(x);
  }
  y = attach_pre_backward(u, y);
  if (free_after)
    for (size_t g : units_[u]) reshard_group(*groups_[g]);
  return y;
}

void FsdpModel::Impl::ensure_root() {
  if (!root_group_) return;
  Group& R = *groups_[*root_group_];
  if (R.state == State::sharded) issue_gather(R);
  if (R.state == State::gathering) complete_gather(R);
}

void FsdpModel::Impl::unshard_unit(size_t u, std::optional<size_t> next) {
  for (size_t g : units_[u])
    if (groups_[g]->state == State::sharded) issue_gather(*groups_[g]);
  if (next && opt_.prefetch)
    for (size_t g : units_[*next])
      if (groups_[g]->comm && groups_[g]->state == State::sharded) issue_gather(*groups_[g]);
  for (size_t g : units_[u])
    if (groups_[g]->state == State::gathering) complete_gather(*groups_[g]);
}

void FsdpModel::Impl::issue_gather(Group& G) {
  const MemCategoryScope as_params(MemCategory::params);  // gathered parameters
  const Tensor& master = G.flat.master();
  if (master.tier() != MemTier::device) stats_.host_to_device_bytes += int64_t(master.nbytes());
  if (!G.comm) {
    // A world of one: the "all-gather" is a cast copy of the master.
    G.flat.copy_out(master, opt_.param_dtype);
  } else {
    const Tensor send = opt_.param_dtype == DType::f32 ? master : master.to(opt_.param_dtype);
    G.gather = G.comm->iall_gather(send);
    G.issued = Clock::now();
    G.state = State::gathering;
    stats_.all_gather_bytes += (G.flat.world() - 1) * G.flat.segment() *
                               static_cast<int64_t>(dtype_size(opt_.param_dtype));
    return;
  }
  G.by_storage.clear();
  for (size_t i = 0; i < G.flat.params().size(); ++i)
    G.by_storage[G.flat.params()[i].handle.storage().get()] = i;
  G.state = State::unsharded;
}

void FsdpModel::Impl::complete_gather(Group& G) {
  const MemCategoryScope as_params(MemCategory::params);
  const Tensor all = detail::complete(G.gather, G.issued, stats_);  // [W·S] in param_dtype
  G.gather.reset();
  G.flat.copy_out(all, opt_.param_dtype);
  G.by_storage.clear();
  for (size_t i = 0; i < G.flat.params().size(); ++i)
    G.by_storage[G.flat.params()[i].handle.storage().get()] = i;
  G.state = State::unsharded;
}

void FsdpModel::Impl::reshard_group(Group& G) {
  if (G.state == State::gathering) {
    detail::complete(G.gather, G.issued, stats_);
    G.gather.reset();
  } else if (G.state == State::unsharded) {
    G.flat.release(opt_.param_dtype);
    G.by_storage.clear();
  }
  G.state = State::sharded;
}

autograd::SavedTensorHooks FsdpModel::Impl::saved_hooks() {
  std::weak_ptr<Impl> weak = weak_from_this();
  autograd::SavedTensorHooks h;
  // Views of any gathered (non-root) group's parameters: this unit's and a prefetched one's.
  h.pack = [weak](const Tensor& t) -> std::any {
    if (auto self = weak.lock())
      for (size_t g = 0; g < self->groups_.size(); ++g) {
        const Group& G = *self->groups_[g];
        if (G.root || G.state != State::unsharded) continue;
        auto it = G.by_storage.find(t.storage().get());
        if (it != G.by_storage.end())
          return SavedParamView{g, it->second, t.shape(), t.strides(), t.offset()};
      }
    return {};  // not a gathered parameter: the enclosing hooks (activation offload) or as is
  };
  h.unpack = [weak](const std::any& a) -> Tensor {
    const auto* v = std::any_cast<SavedParamView>(&a);
    HP_CHECK(v != nullptr);
    auto self = weak.lock();
    if (!self) HP_THROW(ValueError, "fsdp", "backward through a graph whose FsdpModel is gone");
    const FlatParam& p = self->groups_[v->group]->flat.params()[v->param];
    if (!has_data(p.handle))
      HP_THROW(ValueError, "fsdp", p.fqn,
               ": saved for backward but not gathered now (used "
               "outside the group's forward, or its gradient was reduced before this use)");
    return p.handle.as_strided(v->shape, v->strides, v->offset);
  };
  return h;
}

// ---------------------------------------------------------------- backward

Tensor FsdpModel::Impl::attach_pre_backward(size_t u, const Tensor& y) {
  if (!y.defined() || !y.requires_grad() || !autograd::grad_enabled()) return y;
  Tensor out = y.detach();
  std::weak_ptr<Impl> weak = weak_from_this();
  autograd::record("FsdpPreBackward", {y}, {out}, [weak, u](const std::vector<Tensor>& grads) {
    if (auto self = weak.lock()) self->pre_backward(u);
    return std::vector<Tensor>{grads[0]};
  });
  return out;
}

void FsdpModel::Impl::pre_backward(size_t u) {
  note_backward();
  for (size_t g : units_[u]) groups_[g]->in_backward = true;
  std::optional<size_t> prev;
  if (u > 0) prev = u - 1;
  unshard_unit(u, prev);
}

void FsdpModel::Impl::on_grad(size_t g, size_t i) {
  note_backward();
  Group& G = *groups_[g];
  G.in_backward = true;
  if (opt_.reduce_at_finish) {
    // Held until finish_grads: later micro-batches' gradients (param_dtype) add into f32, as the
    // per-backward reduction's results add into the f32 masters' .grad.
    const Tensor& h = G.flat.params()[i].handle;
    if (h.grad().dtype() != DType::f32) {
      const MemCategoryScope as_grads(MemCategory::grads);
      h.set_grad(h.grad().to(DType::f32));
    }
    return;
  }
  if (!G.got_grad[i]) {
    G.got_grad[i] = true;
    ++G.num_grads;
  }
  if (G.num_grads == G.got_grad.size()) post_backward(g);
}

void FsdpModel::Impl::post_backward(size_t g) {
  Group& G = *groups_[g];
  // A world of one without HSDP: the reduction is the cast of pack_grads.
  const MemCategoryScope as_grads(MemCategory::grads);  // the reduction's buffers
  reducer_->push(&G.flat, G.flat.pack_grads(opt_.reduce_dtype), G.comm);
  for (auto& p : G.flat.params()) p.handle.zero_grad();
  G.got_grad.assign(G.got_grad.size(), false);
  G.num_grads = 0;
  G.in_backward = false;
  if (!G.root) reshard_group(G);
}

void FsdpModel::Impl::note_backward() {
  if (callback_queued_) return;
  std::weak_ptr<Impl> weak = weak_from_this();
  autograd::queue_callback([weak] {
    if (auto self = weak.lock()) self->end_backward();
  });
  callback_queued_ = true;
}

void FsdpModel::Impl::end_backward() {
  callback_queued_ = false;
  if (!opt_.reduce_at_finish) {
    reduce_in_backward();
    return;
  }
  // The gradients wait for finish_grads (in_backward stays set); the parameters are freed.
  for (auto& G : groups_)
    if (!G->root && G->in_backward) reshard_group(*G);
}

void FsdpModel::Impl::reduce_in_backward() {
  // Groups some of whose parameters got no gradient (unused), in backward order, the root last.
  for (size_t k = groups_.size(); k-- > 0;)
    if (!groups_[k]->root && groups_[k]->in_backward) post_backward(k);
  if (root_group_ && groups_[*root_group_]->in_backward) post_backward(*root_group_);
}

// ---------------------------------------------------------------- step boundary

void FsdpModel::Impl::finish_grads() {
  if (opt_.reduce_at_finish) reduce_in_backward();
  if (reducer_) reducer_->drain();
  reshard_all();
}

void FsdpModel::Impl::reshard_all() {
  callback_queued_ = false;
  for (auto& G : groups_) {
    reshard_group(*G);
    G->got_grad.assign(G->got_grad.size(), false);
    G->num_grads = 0;
    G->in_backward = false;
  }
}

std::vector<dist::CommPtr> FsdpModel::Impl::shard_comms() const {
  std::vector<dist::CommPtr> out;
  for (size_t k = 0; k < params_.size(); ++k)
    out.push_back(passthrough_ ? nullptr : groups_[where_[k].first]->comm);
  return out;
}

std::vector<FsdpModel::Impl::Shard> FsdpModel::Impl::shards() const {
  std::vector<Shard> out;
  for (size_t k = 0; k < params_.size(); ++k) {
    if (passthrough_) {
      out.push_back({params_[k].first, params_[k].second.shape(), 0, params_[k].second});
      continue;
    }
    const FlatParam& p = groups_[where_[k].first]->flat.params()[where_[k].second];
    out.push_back({p.fqn, p.shape, p.row_offset, p.master});
  }
  return out;
}

// ---------------------------------------------------------------- public

FsdpModel::FsdpModel(nn::Module& root, Groups groups, dist::CommPtr shard_comm,
                     dist::CommPtr replicate_comm, FsdpOptions opt)
    : impl_(std::make_shared<Impl>(root, std::move(groups), std::move(shard_comm),
                                   std::move(replicate_comm), opt)) {
  impl_->install();
}

FsdpModel::~FsdpModel() = default;

std::vector<std::pair<std::string, Tensor>> FsdpModel::sharded_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& s : impl_->shards()) out.emplace_back(s.fqn, s.master);
  return out;
}

std::vector<std::pair<std::string, shard::DTensor>> FsdpModel::parameters() const {
  const std::vector<dist::CommPtr> comms = impl_->shard_comms();
  std::map<const dist::Communicator*, shard::MeshPtr> meshes;  // one per communicator
  shard::MeshPtr single;                                        // a world of one
  auto mesh_of = [&](const dist::CommPtr& c) {
    shard::MeshPtr& m = c ? meshes[c.get()] : single;
    if (!m) {
      // A world of one: the one-rank shard communicator given, else one split off the world
      // (collective: every rank makes it, the root group's).
      dist::CommPtr comm = c                      ? c
                           : impl_->single_comm() ? impl_->single_comm()
                                                  : dist::world()->split(dist::world()->rank(), 0);
      m = std::make_shared<shard::DeviceMesh>(
          std::vector<std::pair<std::string, int64_t>>{{"dp_shard", comm->size()}}, comm);
    }
    return m;
  };
  std::vector<std::pair<std::string, shard::DTensor>> out;
  const auto shards = impl_->shards();
  for (size_t k = 0; k < shards.size(); ++k) {
    const auto& s = shards[k];
    out.emplace_back(s.fqn, shard::DTensor::from_local(
                                s.master, mesh_of(comms[k]),
                                {s.global_shape.empty() ? shard::Placement{shard::Replicate{}}
                                                        : shard::Placement{shard::Shard{0}}},
                                s.global_shape));
  }
  return out;
}
void FsdpModel::finish_grads() {
  impl_->finish_grads();
}
void FsdpModel::reshard() {
  impl_->reshard_all();
}
FsdpModel::Stats FsdpModel::stats() const {
  return impl_->stats();
}
bool FsdpModel::passthrough() const {
  return impl_->passthrough();
}

Groups groups_by_glob(nn::Module& root, const std::vector<std::string>& globs) {
  Groups out;
  std::vector<bool> used(globs.size(), false);
  walk_modules(root, "", [&](const std::string& fqn, nn::Module& m) {
    bool hit = false;
    for (size_t k = 0; k < globs.size(); ++k)
      if (!fqn.empty() && nn::glob_match(globs[k], fqn)) used[k] = hit = true;
    if (hit) out.push_back({fqn, &m, {}, nullptr});
    return !hit;
  });
  for (size_t k = 0; k < globs.size(); ++k)
    if (!used[k]) HP_THROW(ValueError, "fsdp", "group glob '", globs[k], "' matches no module");
  return out;
}

}  // namespace hp::fsdp
