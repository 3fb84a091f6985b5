// One persistent thread pool per process (docs/ARCHITECTURE.md §3).
//
// Size: HP_NUM_THREADS if set, else the CPUs this process may run on (sched_getaffinity).
// parallel_for hands out [begin, end) in contiguous chunks of at least `grain` elements. Kernels keep
// results independent of the thread count: elementwise work is order-free, and reductions use
// parallel_blocks, whose block boundaries depend only on the problem size, with partials combined
// serially in block order.
#pragma once

#include <cstdint>

#include "hp/core/function_ref.h"

namespace hp {

int num_threads();
// Resizes the pool (tests compare 1 vs 2 threads). Not thread-safe against running work.
void set_num_threads(int n);

// fn(chunk_begin, chunk_end) over [begin, end); runs inline for small ranges or nested calls.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  FunctionRef<void(int64_t, int64_t)> fn);

// Splits [0, n) into fixed blocks of `block` elements (the last may be short) and calls
// fn(block_index, block_begin, block_end) for each, in parallel. The split does not depend on the
// thread count, so per-block partials combined in index order give identical results.
int64_t num_blocks(int64_t n, int64_t block);
void parallel_blocks(int64_t n, int64_t block,
                     FunctionRef<void(int64_t, int64_t, int64_t)> fn);

}  // namespace hp
