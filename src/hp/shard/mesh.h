// DeviceMesh: the ranks of a communicator arranged as an n-d grid with named axes
// (docs/ARCHITECTURE.md §4).
//
// Axes are named by role (dp_replicate, dp_shard, cp, tp, ep, pp); ranks are laid out row-major,
// so the last axis varies fastest (with {dp_shard: 2, tp: 2}, ranks 0,1 share a tp group). Each
// axis has its own communicator over the ranks that differ only in that axis's coordinate.
// Construction and sub_mesh are collective over the mesh's communicator.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hp/dist/communicator.h"

namespace hp::shard {

class DeviceMesh {
 public:
  // axes: (name, degree) outermost first; at most one degree may be -1 (inferred from the
  // communicator size). Throws ValueError on every rank when the degrees do not multiply to it.
  explicit DeviceMesh(const std::vector<std::pair<std::string, int64_t>>& axes,
                      dist::CommPtr comm = dist::world());

  int64_t ndim() const { return static_cast<int64_t>(names_.size()); }
  const std::vector<std::string>& axis_names() const { return names_; }
  // Degree of every axis.
  const std::vector<int64_t>& shape() const { return degrees_; }
  int64_t size() const { return comm_->size(); }
  // Index of the axis called name; throws ValueError listing the axes when absent.
  int64_t axis(const std::string& name) const;
  int64_t size(int64_t axis) const { return degrees_.at(static_cast<size_t>(axis)); }
  // This rank's coordinate on each axis.
  const std::vector<int64_t>& coordinates() const { return coords_; }
  int64_t coordinate(int64_t axis) const { return coords_.at(static_cast<size_t>(axis)); }
  // The communicator over the whole mesh and over one axis (its rank = this rank's coordinate).
  const dist::CommPtr& comm() const { return comm_; }
  const dist::CommPtr& axis_comm(int64_t axis) const {
    return axis_comms_.at(static_cast<size_t>(axis));
  }
  const dist::CommPtr& axis_comm(const std::string& name) const { return axis_comm(axis(name)); }
  // The mesh of the given axes (in mesh order) that contains this rank. Collective.
  std::shared_ptr<DeviceMesh> sub_mesh(const std::vector<std::string>& names) const;
  // "DeviceMesh(dp_shard=2, tp=2)".
  std::string str() const;

 private:
  std::vector<std::string> names_;
  std::vector<int64_t> degrees_;
  std::vector<int64_t> coords_;
  dist::CommPtr comm_;
  std::vector<dist::CommPtr> axis_comms_;
};
using MeshPtr = std::shared_ptr<DeviceMesh>;

// Shorthand: std::make_shared<DeviceMesh>(axes, world()).
MeshPtr make_mesh(const std::vector<std::pair<std::string, int64_t>>& axes);

}  // namespace hp::shard
