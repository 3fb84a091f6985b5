// Link model for scale (docs/MULTICORE.md): the comm worker holds a comm task's completion until
// latency + bytes / bandwidth after it was posted, so overlap is measured at the
// communication/compute ratio of a real cluster rather than that of shared memory on one host.
// Calls share the link: a call's modelled transfer starts when the previous call's has ended. A
// call that really takes longer completes when it completes; the model only slows links down.
#pragma once

#include <cstdint>

namespace hp::multicore {

struct LinkModel {
  double gbps = 0.0;        // per-rank bandwidth in GB/s (1e9 bytes/s); 0: no bandwidth term
  double latency_us = 0.0;  // per call
  bool active() const { return gbps > 0.0 || latency_us > 0.0; }
  // Modelled duration of a call moving `bytes` from this rank.
  int64_t delay_ns(int64_t bytes) const;
  // HP_LINK_GBPS and HP_LINK_US (unset: 0); a value that is not a number >= 0 throws ValueError
  // naming the variable.
  static LinkModel from_env();
};

}  // namespace hp::multicore
