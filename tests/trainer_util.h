// Trainers on CPU devices for tests: the tests make the devices and the in-process collective,
// as cb-train does, and give them to the Trainer (which never makes a device itself).
#pragma once

#include <memory>
#include <vector>

#include "kernels/cpu/cpu_device.h"
#include "runtime/collective.h"
#include "sma/trainer.h"

namespace cb::test {

// CPU devices over `cores` (cpu:G with G = devices) and one in-process collective group; or one
// given device.
struct CpuPlacement {
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<std::unique_ptr<Collective>> colls;
  Placement where;

  CpuPlacement(int devices, const std::vector<int>& cores) {
    owned = make_cpu_devices(devices, cores);
    std::vector<Device*> d;
    for (auto& p : owned) d.push_back(p.get());
    wire(d);
  }
  explicit CpuPlacement(Device& dev) { wire({&dev}); }

 private:
  void wire(const std::vector<Device*>& d) {
    colls = make_shared_memory_collectives(static_cast<int>(d.size()));
    where.devices = d;
    for (auto& c : colls) where.collectives.push_back(c.get());
  }
};

// What a test sets: the trainer's options and where it runs.
struct CpuSetup {
  TrainerOptions opts;
  int devices = 1;
  std::vector<int> cores = {0};
};

// A Trainer that owns its CPU placement (base-from-member: the placement outlives the trainer).
class CpuTrainer : private CpuPlacement, public Trainer {
 public:
  CpuTrainer(const Graph& g, const LossSpec& loss, const CpuSetup& s)
      : CpuPlacement(s.devices, s.cores), Trainer(g, loss, s.opts, where) {}
  CpuTrainer(const Graph& g, const LossSpec& loss, const TrainerOptions& o, Device& dev)
      : CpuPlacement(dev), Trainer(g, loss, o, where) {}
};

// The single learner of the reference path: TrainerOptions::plain with `o`'s optimizer settings.
inline TrainerOptions plain(TrainerOptions o) {
  o.learners = 1;
  o.alpha = 0;
  o.central_momentum = 0;
  return o;
}

}  // namespace cb::test
