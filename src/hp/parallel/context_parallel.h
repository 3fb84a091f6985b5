// Context parallelism (CP): every sequence is split over the ranks of a cp communicator and causal
// attention still runs over the whole of it.
//
// Load balance (Megatron-CP / torchtitan's zigzag): a sequence of L tokens is cut into 2·cp equal
// chunks and rank r holds chunks r and 2·cp−1−r, concatenated — its local sequence of L / cp
// tokens. Under the causal mask every rank then does the same work: chunk r sees r + 1 chunks and
// chunk 2·cp−1−r sees 2·cp − r, together 2·cp + 1 chunk blocks on every rank.
//
// Two ways to attend (parallel.cp_method):
//   ring      K/V blocks travel around the ring (non-blocking send/recv of the next block while
//             the current one is multiplied); each block's flash output is merged by its
//             log-sum-exp (online softmax). Backward runs the ring in reverse from the K/V
//             the forward's last hop left (one extra chunk saved), K/V travelling with their
//             dK/dV accumulators, and multiplies the rank's own block last, while its dK/dV
//             arrive: 3·cp − 4 hops per step, none left waiting after the last block. With the zigzag
//             layout, block (q from rank r, kv from rank s) is: s == r, causal over the local
//             2c × 2c; s < r, all local q against the first kv chunk, unmasked; s > r, the second
//             q chunk against all local kv, unmasked (c = L / 2cp).
//   alltoall  Ulysses: an all-to-all turns [B, H, L/cp, D] (sequence-sharded) into
//             [B, H/cp, L, D] (head-sharded), one causal attention over the whole sequence, and
//             the inverse all-to-all. Needs the (tp-local) query heads to divide by cp; kv heads
//             that do not are repeated to the query heads first.
// Both are deterministic: blocks are merged in a fixed order whatever the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hp/dist/communicator.h"

namespace hp::parallel {

// One contiguous run of a row's positions held by this rank.
struct Span {
  int64_t start = 0;
  int64_t length = 0;
};

// The spans of a sequence of `length` tokens that cp rank `index` of `degree` holds, in local
// order: {chunk index, chunk 2·degree−1−index}; {[0, length)} when degree is 1. Throws
// ValueError naming both numbers when length does not divide by 2·degree.
std::vector<Span> context_spans(int64_t length, int64_t degree, int64_t index);

// x's entries along `dim` at those spans, concatenated (differentiable).
Tensor context_shard(const Tensor& x, int64_t dim, int64_t degree, int64_t index);

enum class ContextMethod { ring, alltoall };
ContextMethod context_method_from_name(const std::string& name);

// Causal attention over the whole sequence from this rank's zigzag rows: q [B, Hq, T, D] and
// k, v [B, Hkv, T, D] with T = L / cp → o [B, Hq, T, D] (differentiable; computed in f32, other
// dtypes cast). `scale` multiplies q·k (1/sqrt(D) when <= 0). Collective over `cp`.
// `segments` (packed documents): the whole rows' document ids, i32 [B, L] in position order,
// non-decreasing; attention then stays inside each document (kernels/cpu/attention.h). Every cp
// rank holds the same rows, so ring attention slices the ids of each K/V block it receives
// locally (none travel) and Ulysses masks its whole-sequence attention with them.
Tensor context_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         ContextMethod method, const dist::CommPtr& cp,
                         const Tensor& segments = Tensor());

// Ring attention's communication, summed since the process started: seconds blocked waiting for
// the next K/V block or dK/dV (exposed), and bytes sent.
struct RingStats {
  double exposed_s = 0;
  int64_t bytes = 0;
};
RingStats ring_stats();

namespace detail {
// Benchmarks only: ring attention computes every block on this rank's own K/V and sends nothing
// (the same kernel work without communication; the results are wrong). Returns the previous
// setting.
bool ring_skip_communication(bool skip);
}  // namespace detail

}  // namespace hp::parallel
