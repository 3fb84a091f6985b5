// Multicore plan: the static per-rank task table the runtime executes (docs/MULTICORE.md,
// docs/ARCHITECTURE.md §6).
//
// A plan holds buffers (named contiguous tensors, and views: windows of them), events (monotonic
// counters, reset to 0 at the start of every run) and tasks in plan order. Every task has
//   - a role: cube (a GEMM on buffers, or a callable over blocks run by the GEMM workers), vector
//     (a callable over buffers, split into fixed blocks) or comm (a non-blocking dist::Communicator
//     call, posted and completed by the comm worker);
//   - the buffers it reads and writes (cube tasks derive them from their GEMM);
//   - waits: (event, count) pairs, the task may start when every event's counter >= its count
//     (several tasks triggering one event give fan-in);
//   - at most one trigger: the event it adds 1 to when it completes.
// Workers of a role take that role's tasks in plan order: a task never starts before the earlier
// tasks of its role have started. validate() proves that every task can run (no cycle through
// events and role order, every wait reachable, fan-in counts consistent) and that no two tasks
// touch overlapping elements one of them writes unless an event chain orders them.
//
// Determinism: a task's result depends only on its inputs. Cube GEMMs are cut into row blocks of
// their C whose size depends only on the GEMM's shape; block tasks into blocks of a size fixed by
// the task. The parts are the same in run() and run_sequential(), so the two are bitwise equal for
// any worker counts.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hp/core/error.h"
#include "hp/core/tensor.h"
#include "hp/dist/communicator.h"

namespace hp::multicore {

// An invalid plan; the message starts "[multicore]" and names the task, event or buffer at fault.
class PlanError : public ValueError {
 public:
  using ValueError::ValueError;
};

enum class Role : uint8_t { cube, vector, comm };
const char* role_name(Role r);  // "cube", "vector", "comm"

using BufferId = int32_t;
using EventId = int32_t;
using TaskId = int32_t;
inline constexpr EventId kNoEvent = -1;
inline constexpr BufferId kNoBuffer = -1;

// The task may start once `event` has been triggered at least `count` times in this run.
struct Wait {
  EventId event = kNoEvent;
  int64_t count = 1;
};

// What a task synchronizes on.
struct Deps {
  std::vector<Wait> waits;
  EventId trigger = kNoEvent;
};

// C = alpha·op(A)·op(B) + beta·C on f32 buffers (or bf16 A and B with an f32 or bf16 C), with the
// layout of kernels::gemm_f32 (gemm.h): A [M, K] (or [K, M] with trans_a) at a + a_offset elements,
// row stride lda; B [K, N] (or [N, K] with trans_b) at b + b_offset, ldb; C [M, N] at c + c_offset,
// ldc. An ld of 0 means dense (K, N, N or their transposed forms).
struct Gemm {
  BufferId a = kNoBuffer, b = kNoBuffer, c = kNoBuffer;
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  int64_t a_offset = 0, b_offset = 0, c_offset = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

class Plan;

// What a running task sees: the plan's buffers.
class TaskContext {
 public:
  TaskContext(Plan& plan, TaskId task) : plan_(plan), task_(task) {}
  const Tensor& buffer(BufferId b) const;
  template <class T>
  T* data(BufferId b) const {
    return buffer(b).template data<T>();
  }
  TaskId task() const { return task_; }
  const std::string& task_name() const;
  // Gives dynamic buffer b (Plan::add_dynamic_buffer, written by this task) a new uninitialized
  // tensor of `shape` and returns it.
  const Tensor& allocate(BufferId b, const Shape& shape) const;

 private:
  Plan& plan_;
  TaskId task_;
};

// A block task's body (vector, or cube other than a plain GEMM: a grouped or MX GEMM) over items
// [begin, end) of block `block` (blocks of a size fixed by the task).
using BlockFn = std::function<void(const TaskContext&, int64_t block, int64_t begin, int64_t end)>;
using VectorFn = BlockFn;
// Resolves a cube task's GEMM when the task starts (shapes known only at run time, e.g. the rows
// an all_to_all_v delivered); its parts follow the resolved shape.
using GemmFn = std::function<Gemm(const TaskContext&)>;
// Posts a comm task's non-blocking call (on the comm worker) and returns its handle.
using PostFn = std::function<dist::WorkPtr(const TaskContext&)>;
// Consumes a finished call's result on the comm worker (e.g. rows into a capacity buffer).
using FinishFn = std::function<void(const TaskContext&, const Tensor& result)>;
// A comm task's bytes when they are known only at run time (resolved when the task starts).
using BytesFn = std::function<int64_t(const TaskContext&)>;

// A comm task: `post` issues the call; on completion the result is copied into `result_into`
// (same dtype, at most its size: a smaller result fills its prefix) and/or passed to `finish`.
// `bytes` (what this rank sends to others) feeds the link model; `bytes_fn`, when set, replaces
// it when the task starts (sizes a run-time layout gives).
struct Comm {
  PostFn post = nullptr;
  BufferId result_into = kNoBuffer;
  FinishFn finish = nullptr;
  int64_t bytes = 0;
  BytesFn bytes_fn = nullptr;
};

struct Task {
  std::string name;
  Role role = Role::vector;
  std::vector<BufferId> reads, writes;
  Deps deps;
  // cube GEMM (gemm_fn set: resolved into `gemm` when the task starts)
  Gemm gemm;
  GemmFn gemm_fn;
  // block task (vector, or cube when fn is set): fn over [0, items) in blocks of `block` items
  BlockFn fn;
  int64_t items = 1, block = 1;
  Comm comm;
};

class Plan {
 public:
  BufferId add_buffer(std::string name, Tensor t);
  // A contiguous `shape` window of `parent` starting `offset` elements in (a chunk of rows). Tasks
  // using disjoint windows of one buffer do not conflict in the race check.
  BufferId add_view(std::string name, BufferId parent, const Shape& shape, int64_t offset);
  // A buffer whose shape is known only at run time (e.g. the rows an all_to_all_v will deliver,
  // after its counts arrived): a task that writes it sets its tensor with TaskContext::allocate
  // every run. Until then it holds an empty tensor of `dtype`. The race check treats every use as
  // touching all of it, so each task using it must be ordered after the allocating one; it has no
  // views and cannot be bound.
  BufferId add_dynamic_buffer(std::string name, DType dtype);
  EventId add_event(std::string name);
  // Reads a, b (and c when beta != 0), writes c.
  TaskId add_gemm(std::string name, const Gemm& g, Deps deps);
  // A GEMM whose shape and offsets `fn` gives when the task starts (checked then).
  TaskId add_gemm(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                  GemmFn fn, Deps deps);
  // A cube task that is not one plain GEMM (grouped, MX): fn over blocks, on the GEMM workers.
  TaskId add_cube(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                  int64_t items, int64_t block, BlockFn fn, Deps deps);
  TaskId add_vector(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                    int64_t items, int64_t block, VectorFn fn, Deps deps);
  // A single-block vector task: fn(ctx) once.
  TaskId add_vector(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                    std::function<void(const TaskContext&)> fn, Deps deps);
  // Writes `c.result_into` (if set) besides `writes`.
  TaskId add_comm(std::string name, std::vector<BufferId> reads, std::vector<BufferId> writes,
                  Comm c, Deps deps);

  // Throws PlanError (see the top of this file). Cached: later adds invalidate it.
  void validate() const;
  // A sequential order of all tasks consistent with waits and role order (validates first).
  const std::vector<TaskId>& schedule() const;

  // One line per buffer, event and task (role, parts, reads/writes, waits, trigger).
  std::string dump() const;

  int64_t num_tasks() const { return int64_t(tasks_.size()); }
  const Task& task(TaskId t) const;
  const std::string& event_name(EventId e) const;
  const std::string& buffer_name(BufferId b) const;
  const Tensor& buffer(BufferId b) const;
  // Replaces a buffer's tensor (same numel and dtype), e.g. new inputs for the next run; its
  // views follow. A view cannot be bound.
  void bind(BufferId b, Tensor t);
  // The buffer a view belongs to (a buffer's own id when it is no view) and the element range
  // [begin, end) it covers there.
  BufferId root_of(BufferId b) const;
  std::pair<int64_t, int64_t> range_of(BufferId b) const;
  int64_t num_events() const { return int64_t(events_.size()); }
  int64_t num_buffers() const { return int64_t(buffers_.size()); }
  // Called once per run when a task starts (its waits hold): resolves a dynamic GEMM; returns the
  // parts the task is cut into this run.
  int64_t start(TaskId t);
  // Parts a task is cut into (cube GEMM: rows of C; block task: one block), and runs part p.
  int64_t num_parts(TaskId t) const;
  void run_part(TaskId t, int64_t part);
  // TaskContext::allocate of task t (which must write the dynamic buffer b).
  const Tensor& allocate(TaskId t, BufferId b, const Shape& shape);
  // Completes comm task t with its call's result (result_into, finish).
  void finish_comm(TaskId t, const Tensor& result);
  // Rows of C per cube part, from the shape only.
  static int64_t gemm_rows_per_part(int64_t M, int64_t N, int64_t K);

 private:
  TaskId add(Task t);
  void check_buffer(BufferId b, const std::string& task) const;
  void check_gemm(const std::string& task, const Gemm& g) const;
  TaskId add_blocks(Role role, std::string name, std::vector<BufferId> reads,
                    std::vector<BufferId> writes, int64_t items, int64_t block, BlockFn fn,
                    Deps deps);

  struct Buffer {
    std::string name;
    Tensor tensor;
    BufferId root = kNoBuffer;   // itself unless a view
    int64_t begin = 0, end = 0;  // elements of root (a dynamic buffer: [0, INT64_MAX))
    bool dynamic = false;
  };
  std::vector<Buffer> buffers_;
  std::vector<std::string> events_;
  std::vector<Task> tasks_;
  mutable bool validated_ = false;
  mutable std::vector<TaskId> schedule_;
};

}  // namespace hp::multicore
