// Box arithmetic on chunks and pieces, and the checks every chunk passes before save or load.
#include <algorithm>

#include "hp/checkpoint/dcp_detail.h"
#include "hp/core/error.h"

namespace hp::checkpoint::detail {

int64_t box_numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_len,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_len,
               std::vector<int64_t>* off, std::vector<int64_t>* len) {
  off->resize(a_off.size());
  len->resize(a_off.size());
  for (size_t d = 0; d < a_off.size(); ++d) {
    const int64_t lo = std::max(a_off[d], b_off[d]);
    const int64_t hi = std::min(a_off[d] + a_len[d], b_off[d] + b_len[d]);
    if (hi <= lo) return false;
    (*off)[d] = lo;
    (*len)[d] = hi - lo;
  }
  return true;
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

void check_chunk(const Chunk& c) {
  if (c.fqn.empty()) HP_THROW(ValueError, "ckpt", "a chunk has an empty fqn");
  if (!c.local.defined())
    HP_THROW(ValueError, "ckpt", "chunk '", c.fqn, "': local tensor is undefined");
  const size_t nd = c.global_shape.size();
  if (static_cast<size_t>(c.local.dim()) != nd || c.offsets.size() != nd)
    HP_THROW(ValueError, "ckpt", "chunk '", c.fqn, "': local ", shape_str(c.local.shape()),
             " and offsets ", shape_str(c.offsets), " must have the rank of global shape ",
             shape_str(c.global_shape));
  for (size_t d = 0; d < nd; ++d)
    if (c.offsets[d] < 0 || c.offsets[d] + c.local.shape()[d] > c.global_shape[d])
      HP_THROW(ValueError, "ckpt", "chunk '", c.fqn, "': box offsets ", shape_str(c.offsets),
               " sizes ", shape_str(c.local.shape()), " exceeds global shape ",
               shape_str(c.global_shape));
  if (c.replicated &&
      (c.local.shape() != c.global_shape ||
       std::any_of(c.offsets.begin(), c.offsets.end(), [](int64_t o) { return o != 0; })))
    HP_THROW(ValueError, "ckpt", "chunk '", c.fqn, "': replicated but holds offsets ",
             shape_str(c.offsets), " sizes ", shape_str(c.local.shape()), ", not the full ",
             shape_str(c.global_shape));
}

}  // namespace hp::checkpoint::detail
