// Algebraic canonicalization of a traced graph (docs/FUSION.md "Canonicalization", issue 18): a
// composed activation written with primitive ops is rewritten to the one functor that computes it,
// so the fused program runs the hand kernel's code instead of a chain of primitive ops.
//
// Rewrites (every node of a pattern f32; the pattern's inner nodes used only inside it, so a
// rewrite never adds work; commutative operands in either order):
//
//   1/(1 + exp(-y)), reciprocal(1 + exp(-y))  -> sigmoid(y)    bitwise (the Sigmoid functor's own
//                                                               expression)
//   y / (1 + exp(-y))                         -> silu(y)       bitwise (the Silu functor's)
//   y · sigmoid(y)                            -> silu(y)       within 5 ulp of the composed form
//   0.5·x·(1 + tanh(k·(x + c·x·x·x)))         -> gelu_tanh(x)  within 8 ulp + 5e-7·|x| of it
//     (k = sqrt(2/π), c = 0.044715 as f32; either product in any association; x·x may be square(x)
//     or pow(x, 2), x·x·x pow(x, 3))
//
// The bounds are those tests/fusion holds the composed form to against the hand kernel, checked
// over every f32 input (docs/FUSION.md gives the measured maxima). Deliberately not rewritten,
// because the composed form differs from the functor beyond any such bound:
// (exp(a) - exp(-a)) / (exp(a) + exp(-a)) -> tanh(a) (cancellation near 0, Inf/Inf = NaN for
// |a| > 88.7) and exp(y) / (1 + exp(y)) -> sigmoid(y) (NaN for y > 88.7). bf16 nodes are not
// rewritten: each composed node rounds to bf16, the functor once.
#pragma once

#include "hp/fusion/ir.h"

namespace hp::fusion {

// Writes the canonical form of g into *out (dead nodes dropped, input nodes and argument numbers
// kept) and returns the number of rewrites; returns 0 and leaves *out untouched when nothing
// matches. Runs on a cache miss, before the stencil matcher and compile.
int simplify(const Graph& g, Graph* out);

}  // namespace hp::fusion
