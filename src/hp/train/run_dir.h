// The run directory's ownership and the run's stop signals (trainer.h): rank 0 locks run.dir for
// the whole run and checks it may start there; SIGINT / SIGTERM ask the loop to stop, and every
// rank agrees on when.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>

#include "hp/dist/communicator.h"

namespace hp::train {

struct Config;

// Whether `flag` is set on any rank (one all-reduce; every rank must call it).
bool any_rank(dist::Communicator& comm, bool flag);

// A claimed run directory: rank 0 holds an exclusive flock on <run.dir>/.lock until this is
// destroyed, the file naming the holder ("host H pid P"). The kernel drops the lock when the
// process ends, however it ends.
class RunDir {
 public:
  // Collective. Rank 0 creates run.dir and takes its lock; it refuses a fresh run (resume "") into
  // a directory holding checkpoints (they would be pruned or mixed with the new run's), or with
  // `overwrite` deletes the old step-* directories, `latest` and metrics first. Every rank learns
  // the verdict, so a refusal is an error everywhere rather than a hang. Then rank 0 writes the
  // resolved config.yaml (a warning on `log` when it cannot: each checkpoint holds a copy).
  RunDir(const Config& cfg, const std::string& resume, bool overwrite, dist::Communicator& world,
         std::ostream& log);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

 private:
  class Lock;
  std::unique_ptr<Lock> lock_;
};

// SIGINT / SIGTERM ask the loop to save and stop after the current step or micro-batch, while one
// of these lives (one at a time). A second signal (an impatient Ctrl-C) takes the default action
// at once.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The stop signal every rank agrees on: the largest one any rank received (0: none).
  // Collective: every rank asks at the same point, so all stop together.
  int agreed(dist::Communicator& comm) const;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

}  // namespace hp::train
