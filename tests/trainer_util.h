// Trainers on CPU devices for tests: the tests make the devices and the in-process collective,
// as cb-train does, and give them to the Trainer (which never makes a device itself).
#pragma once

#include <memory>
#include <random>
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

// `count` batches of n random images [n, 3, 32, 32] in [-1, 1) with labels in [0, 10): data for
// ResNet-20 where a test needs steps but no data set.
inline std::vector<Batch> random_cifar_batches(std::mt19937_64& rng, int count, int64_t n) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<Batch> out(static_cast<size_t>(count));
  for (Batch& b : out) {
    Tensor img, lab;
    img.dims = {n, 3, 32, 32};
    img.bytes.resize(static_cast<size_t>(img.numel()) * sizeof(float));
    for (int64_t i = 0; i < img.numel(); ++i) img.data<float>()[i] = u(rng);
    lab.dtype = DType::I64;
    lab.dims = {n};
    lab.bytes.resize(static_cast<size_t>(n) * sizeof(int64_t));
    for (int64_t i = 0; i < n; ++i) lab.data<int64_t>()[i] = static_cast<int64_t>(rng() % 10);
    b.inputs = {img};
    b.target = lab;
  }
  return out;
}

// The single learner of the reference path: TrainerOptions::plain with `o`'s optimizer settings.
inline TrainerOptions plain(TrainerOptions o) {
  o.learners = 1;
  o.alpha = 0;
  o.central_momentum = 0;
  return o;
}

}  // namespace cb::test
