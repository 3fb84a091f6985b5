#include "hp/multicore/plan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "hp/kernels/cpu/gemm.h"

namespace hp::multicore {
namespace {

constexpr const char* kC = "multicore";

// A cube part has at least 2^24 multiply-adds (~0.5 ms on one Zen 3 core: row blocks much thinner
// than 64 lose sgemm efficiency) and a task at most 16 parts, so 1, 2, 4 or 8 GEMM threads share
// one large GEMM without the split depending on them.
constexpr double kPartFma = double(1 << 24);
constexpr int64_t kMaxParts = 16;
constexpr int64_t kRowAlign = 16;  // the sgemm micro-kernel's register block

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::string ids(const std::vector<int32_t>& v, const std::function<std::string(int32_t)>& name) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + name(v[i]);
  return s + "]";
}

}  // namespace

const char* role_name(Role r) {
  switch (r) {
    case Role::cube:
      return "cube";
    case Role::vector:
      return "vector";
    case Role::comm:
      return "comm";
  }
  return "?";
}

const Tensor& TaskContext::buffer(BufferId b) const {
  return plan_.buffer(b);
}
const std::string& TaskContext::task_name() const {
  return plan_.task(task_).name;
}
const Tensor& TaskContext::allocate(BufferId b, const Shape& shape) const {
  return plan_.allocate(task_, b, shape);
}

BufferId Plan::add_buffer(std::string name, Tensor t) {
  if (!t.defined() || !t.is_contiguous())
    HP_THROW(PlanError, kC, "buffer '", name, "' must be a defined contiguous tensor");
  validated_ = false;
  const BufferId id = BufferId(buffers_.size());
  const int64_t n = t.numel();
  buffers_.push_back({std::move(name), std::move(t), id, 0, n});
  return id;
}

namespace {

Tensor window(const Tensor& root, const Shape& shape, int64_t begin) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) strides[d - 1] = strides[d] * shape[d];
  return root.as_strided(shape, strides, root.offset() + begin);
}

}  // namespace

BufferId Plan::add_dynamic_buffer(std::string name, DType dtype) {
  validated_ = false;
  const BufferId id = BufferId(buffers_.size());
  buffers_.push_back({std::move(name), empty({0}, dtype), id, 0, INT64_MAX, true});
  return id;
}

const Tensor& Plan::allocate(TaskId t, BufferId b, const Shape& shape) {
  check_buffer(b, task(t).name);
  const std::vector<BufferId>& w = task(t).writes;
  if (!buffers_[size_t(b)].dynamic || std::find(w.begin(), w.end(), b) == w.end())
    HP_THROW(PlanError, kC, "task '", task(t).name, "' allocates buffer '", buffer_name(b),
             "', which is not a dynamic buffer it writes");
  // The race check orders every other use of b with this task, so none runs during the swap.
  Buffer& x = buffers_[size_t(b)];
  x.tensor = empty(shape, x.tensor.dtype());
  return x.tensor;
}

BufferId Plan::add_view(std::string name, BufferId parent, const Shape& shape, int64_t offset) {
  check_buffer(parent, name);
  const Buffer& p = buffers_[size_t(parent)];
  if (p.dynamic)
    HP_THROW(PlanError, kC, "view '", name, "' of dynamic buffer '", p.name,
             "': its shape is known only at run time");
  const int64_t n = shape_numel(shape);
  if (offset < 0 || offset + n > p.end - p.begin)
    HP_THROW(PlanError, kC, "view '", name, "' of ", n, " elements at offset ", offset,
             " does not fit buffer '", p.name, "' ", p.tensor.desc());
  const Buffer& root = buffers_[size_t(p.root)];
  Buffer v{std::move(name), window(root.tensor, shape, p.begin + offset), p.root, p.begin + offset,
           p.begin + offset + n};
  validated_ = false;
  buffers_.push_back(std::move(v));
  return BufferId(buffers_.size() - 1);
}

BufferId Plan::root_of(BufferId b) const {
  check_buffer(b, "?");
  return buffers_[size_t(b)].root;
}

std::pair<int64_t, int64_t> Plan::range_of(BufferId b) const {
  check_buffer(b, "?");
  return {buffers_[size_t(b)].begin, buffers_[size_t(b)].end};
}

EventId Plan::add_event(std::string name) {
  validated_ = false;
  events_.push_back(std::move(name));
  return EventId(events_.size() - 1);
}

void Plan::check_buffer(BufferId b, const std::string& task) const {
  if (b < 0 || b >= BufferId(buffers_.size()))
    HP_THROW(PlanError, kC, "task '", task, "' names buffer ", b, ", but the plan has ",
             buffers_.size(), " buffers");
}

TaskId Plan::add(Task t) {
  for (const Wait& w : t.deps.waits)
    if (w.event < 0 || w.event >= EventId(events_.size()))
      HP_THROW(PlanError, kC, "task '", t.name, "' waits on event ", w.event, ", but the plan has ",
               events_.size(), " events");
  if (t.deps.trigger != kNoEvent &&
      (t.deps.trigger < 0 || t.deps.trigger >= EventId(events_.size())))
    HP_THROW(PlanError, kC, "task '", t.name, "' triggers event ", t.deps.trigger,
             ", but the plan has ", events_.size(), " events");
  for (BufferId b : t.reads) check_buffer(b, t.name);
  for (BufferId b : t.writes) check_buffer(b, t.name);
  validated_ = false;
  tasks_.push_back(std::move(t));
  return TaskId(tasks_.size() - 1);
}

void Plan::check_gemm(const std::string& task, const Gemm& g) const {
  for (BufferId b : {g.a, g.b, g.c}) check_buffer(b, task);
  if (g.M < 0 || g.N < 0 || g.K < 0)
    HP_THROW(PlanError, kC, "task '", task, "': negative GEMM size M=", g.M, " N=", g.N,
             " K=", g.K);
  const DType da = buffer(g.a).dtype(), db = buffer(g.b).dtype(), dc = buffer(g.c).dtype();
  const bool f32 = da == DType::f32 && db == DType::f32 && dc == DType::f32;
  const bool bf16 =
      da == DType::bf16 && db == DType::bf16 && (dc == DType::f32 || dc == DType::bf16);
  if (!f32 && !bf16)
    HP_THROW(PlanError, kC, "task '", task, "': GEMM dtypes A ", dtype_name(da), ", B ",
             dtype_name(db), ", C ", dtype_name(dc), " (want f32/f32/f32 or bf16/bf16/f32|bf16)");
  // The last element each operand touches must lie inside its buffer.
  auto extent = [&](const char* what, BufferId b, int64_t off, int64_t rows, int64_t cols,
                    int64_t ld) {
    const int64_t need = rows == 0 || cols == 0 ? off : off + (rows - 1) * ld + cols;
    if (off < 0 || ld < cols || need > buffer(b).numel())
      HP_THROW(PlanError, kC, "task '", task, "': ", what, " [", rows, ", ", cols, "] at offset ",
               off, " with ld ", ld, " needs ", need, " elements, buffer '", buffer_name(b),
               "' has ", buffer(b).numel());
  };
  extent("A", g.a, g.a_offset, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda);
  extent("B", g.b, g.b_offset, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb);
  extent("C", g.c, g.c_offset, g.M, g.N, g.ldc);
}

namespace {

// An ld of 0 means dense.
Gemm with_dense_lds(Gemm g) {
  if (g.lda == 0) g.lda = g.trans_a ? g.M : g.K;
  if (g.ldb == 0) g.ldb = g.trans_b ? g.K : g.N;
  if (g.ldc == 0) g.ldc = g.N;
  return g;
}

}  // namespace

TaskId Plan::add_gemm(std::string name, const Gemm& g, Deps deps) {
  Task t;
  t.name = std::move(name);
  t.role = Role::cube;
  t.gemm = with_dense_lds(g);
  check_gemm(t.name, t.gemm);
  t.reads = {g.a, g.b};
  if (g.beta != 0.0f) t.reads.push_back(g.c);
  t.writes = {g.c};
  t.deps = std::move(deps);
  return add(std::move(t));
}

TaskId Plan::add_gemm(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                      GemmFn fn, Deps deps) {
  if (!fn) HP_THROW(PlanError, kC, "task '", name, "': dynamic GEMM needs a function");
  Task t;
  t.name = std::move(name);
  t.role = Role::cube;
  t.gemm_fn = std::move(fn);
  t.reads = std::move(reads);
  t.writes = std::move(writes);
  t.deps = std::move(deps);
  return add(std::move(t));
}

TaskId Plan::add_blocks(Role role, std::string name, std::vector<BufferId> reads,
                        std::vector<BufferId> writes, int64_t items, int64_t block, BlockFn fn,
                        Deps deps) {
  if (items < 0 || block < 1 || !fn)
    HP_THROW(PlanError, kC, "task '", name, "': ", role_name(role), " task needs items >= 0 (got ",
             items, "), block >= 1 (got ", block, ") and a function");
  Task t;
  t.name = std::move(name);
  t.role = role;
  t.reads = std::move(reads);
  t.writes = std::move(writes);
  t.items = items;
  t.block = block;
  t.fn = std::move(fn);
  t.deps = std::move(deps);
  return add(std::move(t));
}

TaskId Plan::add_cube(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                      int64_t items, int64_t block, BlockFn fn, Deps deps) {
  return add_blocks(Role::cube, std::move(name), std::move(reads), std::move(writes), items, block,
                    std::move(fn), std::move(deps));
}

TaskId Plan::add_vector(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                        int64_t items, int64_t block, VectorFn fn, Deps deps) {
  return add_blocks(Role::vector, std::move(name), std::move(reads), std::move(writes), items,
                    block, std::move(fn), std::move(deps));
}

TaskId Plan::add_vector(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                        std::function<void(const TaskContext&)> fn, Deps deps) {
  if (!fn) HP_THROW(PlanError, kC, "task '", name, "': vector task needs a function");
  return add_vector(
      std::move(name), std::move(reads), std::move(writes), 1, 1,
      [f = std::move(fn)](const TaskContext& c, int64_t, int64_t, int64_t) { f(c); },
      std::move(deps));
}

TaskId Plan::add_comm(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                      Comm c, Deps deps) {
  if (!c.post) HP_THROW(PlanError, kC, "task '", name, "': comm task needs a post function");
  Task t;
  t.name = std::move(name);
  t.role = Role::comm;
  t.reads = std::move(reads);
  t.writes = std::move(writes);
  if (c.result_into != kNoBuffer) {
    check_buffer(c.result_into, t.name);
    if (std::find(t.writes.begin(), t.writes.end(), c.result_into) == t.writes.end())
      t.writes.push_back(c.result_into);
  }
  t.comm = std::move(c);
  t.deps = std::move(deps);
  return add(std::move(t));
}

const Task& Plan::task(TaskId t) const {
  HP_CHECK(t >= 0 && t < TaskId(tasks_.size()), "task ", t);
  return tasks_[size_t(t)];
}
const std::string& Plan::event_name(EventId e) const {
  HP_CHECK(e >= 0 && e < EventId(events_.size()), "event ", e);
  return events_[size_t(e)];
}
const std::string& Plan::buffer_name(BufferId b) const {
  HP_CHECK(b >= 0 && b < BufferId(buffers_.size()), "buffer ", b);
  return buffers_[size_t(b)].name;
}
const Tensor& Plan::buffer(BufferId b) const {
  HP_CHECK(b >= 0 && b < BufferId(buffers_.size()), "buffer ", b);
  return buffers_[size_t(b)].tensor;
}

void Plan::bind(BufferId b, Tensor t) {
  const Tensor& old = buffer(b);
  if (buffers_[size_t(b)].dynamic)
    HP_THROW(PlanError, kC, "bind of dynamic buffer '", buffer_name(b),
             "': the task that writes it allocates it");
  if (!t.defined() || !t.is_contiguous() || t.numel() != old.numel() || t.dtype() != old.dtype())
    HP_THROW(PlanError, kC, "bind of buffer '", buffer_name(b), "' (", old.desc(),
             ") to a tensor that is not a contiguous one of the same size and dtype");
  if (root_of(b) != b)
    HP_THROW(PlanError, kC, "bind of view '", buffer_name(b), "': bind its buffer '",
             buffer_name(root_of(b)), "' instead");
  buffers_[size_t(b)].tensor = std::move(t);
  for (Buffer& v : buffers_)
    if (v.root == b && &v != &buffers_[size_t(b)])
      v.tensor = window(buffers_[size_t(b)].tensor, v.tensor.shape(), v.begin);
}

int64_t Plan::gemm_rows_per_part(int64_t M, int64_t N, int64_t K) {
  const double fma = double(M) * double(N) * double(K);
  const int64_t parts = std::clamp<int64_t>(int64_t(fma / kPartFma), 1, kMaxParts);
  const int64_t rows = ceil_div(ceil_div(std::max<int64_t>(M, 1), parts), kRowAlign) * kRowAlign;
  return std::min(std::max<int64_t>(M, 1), rows);
}

int64_t Plan::start(TaskId id) {
  Task& t = tasks_[size_t(id)];
  if (t.gemm_fn) {
    t.gemm = with_dense_lds(t.gemm_fn(TaskContext(*this, id)));
    check_gemm(t.name, t.gemm);
  }
  if (t.comm.bytes_fn) t.comm.bytes = t.comm.bytes_fn(TaskContext(*this, id));
  return num_parts(id);
}

int64_t Plan::num_parts(TaskId id) const {
  const Task& t = task(id);
  if (t.fn) return std::max<int64_t>(1, ceil_div(t.items, t.block));
  if (t.role == Role::cube)
    return t.gemm.M == 0 ? 1 : ceil_div(t.gemm.M, gemm_rows_per_part(t.gemm.M, t.gemm.N, t.gemm.K));
  return 1;
}

void Plan::run_part(TaskId id, int64_t part) {
  const Task& t = task(id);
  if (t.fn) {
    const int64_t b = part * t.block, e = std::min(t.items, b + t.block);
    t.fn(TaskContext(*this, id), part, b, std::max(b, e));
    return;
  }
  HP_CHECK(t.role == Role::cube, "run_part of comm task '", t.name, "'");
  const Gemm& g = t.gemm;
  if (g.M == 0) return;
  // Rows [m0, m0 + mt) of C take the same rows of op(A): an offset of m0 rows in A, or m0
  // columns of the stored [K, M] A when trans_a.
  const int64_t rows = gemm_rows_per_part(g.M, g.N, g.K);
  const int64_t m0 = part * rows, mt = std::min(rows, g.M - m0);
  const int64_t a_off = g.a_offset + (g.trans_a ? m0 : m0 * g.lda);
  const int64_t c_off = g.c_offset + m0 * g.ldc;
  const Tensor &A = buffer(g.a), &B = buffer(g.b), &C = buffer(g.c);
  if (A.dtype() == DType::f32) {
    kernels::gemm_f32(g.trans_a, g.trans_b, mt, g.N, g.K, g.alpha, A.data<float>() + a_off, g.lda,
                      B.data<float>() + g.b_offset, g.ldb, g.beta, C.data<float>() + c_off, g.ldc);
  } else {
    auto* c = static_cast<char*>(C.raw_data()) + c_off * int64_t(C.itemsize());
    const auto* a = static_cast<const uint16_t*>(A.raw_data());  // bf16 bits
    const auto* b = static_cast<const uint16_t*>(B.raw_data());
    kernels::gemm_bf16(g.trans_a, g.trans_b, mt, g.N, g.K, g.alpha, a + a_off, g.lda,
                       b + g.b_offset, g.ldb, g.beta, c, C.dtype(), g.ldc);
  }
}

void Plan::finish_comm(TaskId id, const Tensor& result) {
  const Task& t = task(id);
  const Comm& c = t.comm;
  if (c.result_into != kNoBuffer) {
    const Tensor& dst = buffer(c.result_into);
    if (!result.defined() || result.dtype() != dst.dtype() || result.numel() > dst.numel())
      HP_THROW(ValueError, kC, "comm task '", t.name, "': result ",
               result.defined() ? result.desc() : std::string("(none)"), " does not fit buffer '",
               buffer_name(c.result_into), "' ", dst.desc());
    if (result.nbytes() > 0)  // an empty result's data may be null
      std::memcpy(dst.raw_data(), result.contiguous().raw_data(), result.nbytes());
  }
  if (c.finish) c.finish(TaskContext(*this, id), result);
}

std::string Plan::dump() const {
  std::ostringstream os;
  auto bname = [&](int32_t b) { return buffer_name(b); };
  os << "plan: " << buffers_.size() << " buffers, " << events_.size() << " events, "
     << tasks_.size() << " tasks\n";
  for (size_t b = 0; b < buffers_.size(); ++b) {
    const Buffer& x = buffers_[b];
    os << "  buffer " << b << " '" << x.name << "' " << x.tensor.desc();
    if (x.root != BufferId(b))
      os << " view of '" << buffers_[size_t(x.root)].name << "' [" << x.begin << ", " << x.end
         << ")";
    if (x.dynamic) os << " dynamic";
    os << "\n";
  }
  for (size_t e = 0; e < events_.size(); ++e) os << "  event " << e << " '" << events_[e] << "'\n";
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const Task& t = tasks_[i];
    os << "  task " << i << " '" << t.name << "' " << role_name(t.role) << " parts "
       << num_parts(TaskId(i));
    if (t.role == Role::cube && !t.fn) {
      if (t.gemm_fn)
        os << " gemm (resolved at start) ";
      else
        os << " gemm ";
      os << t.gemm.M << "x" << t.gemm.N << "x" << t.gemm.K;
    }
    if (t.role == Role::comm) os << " bytes " << t.comm.bytes;
    os << " reads " << ids(t.reads, bname) << " writes " << ids(t.writes, bname) << " waits [";
    for (size_t w = 0; w < t.deps.waits.size(); ++w)
      os << (w ? ", " : "") << "'" << event_name(t.deps.waits[w].event)
         << "'>=" << t.deps.waits[w].count;
    os << "] triggers ";
    if (t.deps.trigger == kNoEvent)
      os << "-";
    else
      os << "'" << event_name(t.deps.trigger) << "'";
    os << "\n";
  }
  return os.str();
}

}  // namespace hp::multicore
