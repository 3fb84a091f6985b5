#include "hp/shard/mesh.h"

#include <algorithm>

namespace hp::shard {

namespace {
std::string axes_str(const std::vector<std::pair<std::string, int64_t>>& axes) {
  std::string s;
  for (const auto& [name, d] : axes) s += (s.empty() ? "" : ", ") + name + "=" + std::to_string(d);
  return s;
}
}  // namespace

DeviceMesh::DeviceMesh(const std::vector<std::pair<std::string, int64_t>>& axes, dist::CommPtr comm)
    : comm_(std::move(comm)) {
  HP_CHECK(comm_ != nullptr);
  const int64_t world = comm_->size();
  if (axes.empty()) HP_THROW(ValueError, "mesh", "a mesh needs at least one axis");
  int64_t known = 1, inferred = -1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto& [name, d] = axes[i];
    if (name.empty() || std::count(names_.begin(), names_.end(), name))
      HP_THROW(ValueError, "mesh", "axis names must be unique and non-empty, got (", axes_str(axes),
               ")");
    names_.push_back(name);
    if (d == -1 && inferred < 0) {
      inferred = static_cast<int64_t>(i);
    } else if (d < 1) {
      HP_THROW(ValueError, "mesh", "degree of axis '", name,
               "' must be >= 1 (or one -1 to infer), got (", axes_str(axes), ")");
    } else {
      known *= d;
    }
  }
  degrees_.clear();
  for (const auto& a : axes) degrees_.push_back(a.second);
  if (inferred >= 0) {
    if (world % known != 0)
      HP_THROW(ValueError, "mesh", "degrees (", axes_str(axes), ") cannot be completed: ", known,
               " does not divide world size ", world);
    degrees_[static_cast<size_t>(inferred)] = world / known;
  } else if (known != world) {
    HP_THROW(ValueError, "mesh", "degrees (", axes_str(axes), ") multiply to ", known,
             " but the world size is ", world);
  }
  // Row-major coordinates: the last axis varies fastest.
  int64_t rest = comm_->rank();
  coords_.assign(degrees_.size(), 0);
  for (size_t i = degrees_.size(); i-- > 0;) {
    coords_[i] = rest % degrees_[i];
    rest /= degrees_[i];
  }
  // The axis-i group is every rank with the same coordinates elsewhere: color = the rank with
  // coordinate i zeroed, key = coordinate i.
  int64_t stride = 1;
  std::vector<int64_t> strides(degrees_.size());
  for (size_t i = degrees_.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= degrees_[i];
  }
  for (size_t i = 0; i < degrees_.size(); ++i) {
    int color = static_cast<int>(comm_->rank() - coords_[i] * strides[i]);
    axis_comms_.push_back(comm_->split(color, static_cast<int>(coords_[i])));
  }
}

int64_t DeviceMesh::axis(const std::string& name) const {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<int64_t>(i);
  HP_THROW(ValueError, "mesh", "no axis '", name, "' in ", str());
}

std::shared_ptr<DeviceMesh> DeviceMesh::sub_mesh(const std::vector<std::string>& names) const {
  std::vector<bool> keep(names_.size(), false);
  for (const auto& n : names) keep[static_cast<size_t>(axis(n))] = true;
  std::vector<std::pair<std::string, int64_t>> axes;
  int64_t color = 0, key = 0;
  for (size_t i = 0; i < names_.size(); ++i) {
    if (keep[i]) {
      axes.emplace_back(names_[i], degrees_[i]);
      key = key * degrees_[i] + coords_[i];
    } else {
      color = color * degrees_[i] + coords_[i];
    }
  }
  auto comm = comm_->split(static_cast<int>(color), static_cast<int>(key));
  return std::make_shared<DeviceMesh>(axes, comm);
}

std::string DeviceMesh::str() const {
  std::vector<std::pair<std::string, int64_t>> axes;
  for (size_t i = 0; i < names_.size(); ++i) axes.emplace_back(names_[i], degrees_[i]);
  return "DeviceMesh(" + axes_str(axes) + ")";
}

MeshPtr make_mesh(const std::vector<std::pair<std::string, int64_t>>& axes) {
  return std::make_shared<DeviceMesh>(axes, dist::world());
}

}  // namespace hp::shard
