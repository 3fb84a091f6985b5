#include "hp/multicore/link.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "hp/core/error.h"

namespace hp::multicore {
namespace {

double env_number(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return 0.0;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(x) || x < 0.0)
    HP_THROW(ValueError, "multicore", name, "='", v, "' is not a number >= 0");
  return x;
}

}  // namespace

int64_t LinkModel::delay_ns(int64_t bytes) const {
  double ns = latency_us * 1e3;
  if (gbps > 0.0) ns += double(bytes) / gbps;  // bytes / (GB/s) = ns
  return int64_t(ns);
}

LinkModel LinkModel::from_env() {
  LinkModel m;
  m.gbps = env_number("HP_LINK_GBPS");
  m.latency_us = env_number("HP_LINK_US");
  return m;
}

}  // namespace hp::multicore
