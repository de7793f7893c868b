// What of a model a run needs to continue, as host copies (with LoopState, what a checkpoint
// serialises), and the trained model such a state holds (what cb-export writes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor.h"
#include "sma/model.h"

namespace cb {

// Everything of the model that a run needs to continue, as host copies (with LoopState, what a
// checkpoint serialises).
struct LearnerState {
  std::vector<float> params, opt1, opt2, state;  // [P], [P] (velocity or m), [P] (v) or empty, [S]
  int64_t steps = 0;                             // the learner's optimizer steps since its start
};
struct ModelState {
  int learners_per_device = 0;
  int64_t steps = 0;                   // trainer steps (also each learner's Dropout position)
  std::vector<float> z, z_prev;        // identical on every device
  std::vector<LearnerState> learners;  // this process's, device-major
  bool model_is_mean = false;          // alpha 0: the model is the learners' average, not z
  // With --ema, per device of this process: the weight average of the parameters (of z: the same
  // on every device; with model_is_mean, the device's share) and of the BN statistics (its
  // share); empty without.
  std::vector<std::vector<float>> ema, ema_state;
};

// The trained model a state holds, host copies by value name: the weight average when the state
// has one, else z (or, with model_is_mean, the learners' average) and the learners' averaged
// BatchNorm statistics, averaged in the order the
// trainer averages them (per device, then over devices), so that on the CPU it equals
// Trainer::trained_tensors() bit for bit. What cb-export writes from a checkpoint. Throws cb::Error
// when the state does not fit `m`.
std::map<std::string, Tensor> model_tensors(const TrainModel& m, const ModelState& s);

}  // namespace cb
