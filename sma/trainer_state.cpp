// The trainer's buffers read back to the host: the trained model, z, a learner's rows and
// gradients, and the whole state a checkpoint saves (restore() is in trainer.cpp, beside the
// learners it restarts).
#include <map>
#include <string>
#include <vector>

#include "sma/device_replicas.h"
#include "sma/trainer.h"

namespace cb {

std::map<std::string, Tensor> Trainer::trained_tensors() {
  average_for_eval();
  Group& g = *groups_[0];
  const auto [params, state] = eval_buffers(EvalWeights::Model);
  auto m = model_.copy_slots(*g.dev, model_.param_slots(), params);
  m.merge(model_.copy_slots(*g.dev, model_.state_slots(), state));
  return m;
}

std::vector<float> Trainer::central(int device) const {
  settle();
  const Group& g = *groups_.at(static_cast<size_t>(device));
  std::vector<float> f(static_cast<size_t>(model_.flat_elems()));
  g.dev->download(f.data(), g.z.get(), f.size() * sizeof(float));
  return f;
}

std::vector<float> Trainer::row(Rows which, int learner) const {
  settle();
  CB_CHECK(learner >= 0 && learner < local_learners());
  const Group& g = *groups_[static_cast<size_t>(learner / k_)];
  const DeviceBuffer& b = which == Rows::Params     ? g.params
                          : which == Rows::Velocity ? g.opt1
                                                    : g.grads;
  const int64_t P = model_.flat_elems();
  std::vector<float> f(static_cast<size_t>(P));
  g.dev->download(f.data(), b.f32((learner % k_) * P), f.size() * sizeof(float));
  return f;
}

std::vector<float> Trainer::replica(int learner) const { return row(Rows::Params, learner); }
std::vector<float> Trainer::velocity(int learner) const { return row(Rows::Velocity, learner); }

std::map<std::string, Tensor> Trainer::gradients(int learner) const {
  settle();
  CB_CHECK(learner >= 0 && learner < local_learners());
  const Group& g = *groups_[static_cast<size_t>(learner / k_)];
  return model_.copy_slots(*g.dev, model_.param_slots(),
                           g.grads.f32((learner % k_) * model_.flat_elems()));
}

ModelState Trainer::state() const {
  settle();
  ModelState s;
  s.learners_per_device = k_;
  s.steps = steps_;
  s.model_is_mean = alpha_ == 0;
  s.z = central(0);
  const Group& g0 = *groups_[0];
  if (g0.z_prev.get()) {
    s.z_prev.resize(s.z.size());
    g0.dev->download(s.z_prev.data(), g0.z_prev.get(), s.z_prev.size() * sizeof(float));
  } else {
    s.z_prev = s.z;  // z does not move (alpha 0): its momentum is at rest
  }
  const int64_t P = model_.flat_elems(), S = model_.state_elems();
  for (int l = 0; l < local_learners(); ++l)
    s.learners.push_back(groups_[static_cast<size_t>(l / k_)]->learner(l % k_, P, S));
  if (averages())
    for (const auto& g : groups_) {
      s.ema.push_back(g->row(g->ema, 0, P));
      s.ema_state.push_back(g->row(g->ema_state, 0, S));
    }
  return s;
}

}  // namespace cb
