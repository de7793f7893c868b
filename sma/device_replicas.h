// One device's share of the trainer (sma/trainer.h): the flat buffers of its k learners and of
// the central model, and the kernel arguments of the SMA update over them.
//   [k][P] params, grads, opt1 (velocity or m), opt2 (AdamW's v)
//   [k][S] state (BatchNorm statistics), i64 [k] steps (each learner's optimizer steps), [k]
//   norms (the gradients' norms, when clipping)
//   [P] z; z_prev and sum (the corrections' sum) only while a pull moves z (alpha != 0);
//   mean (the learners' average) only with more than one learner in the job (with one, the
//   learner's row is its own mean); [S] state_avg
// One learner alone (alpha 0) holds what torch.optim holds plus z: params, grads, the optimizer
// state and the initial model (z, for checkpoints and for learners added later).
//   with --ema: [P] ema, [S] ema_state (this device's part, trainer.h), and the evaluated sums of
//   the parts over the devices, [P] ema_sum, [S] ema_state_sum
// Every method runs on the device's driver thread (or while it is idle), in the order of the
// device's synchronisation stream; `updated` is the event of the last update of the rows.
#pragma once

#include <any>
#include <exception>
#include <vector>

#include "runtime/collective.h"
#include "runtime/device.h"
#include "sma/model.h"
#include "sma/worker.h"

namespace cb {

struct TrainerOptions;
struct LearnerState;

struct DeviceReplicas {
  int index = 0;  // among this process's devices
  Device* dev = nullptr;
  Collective* coll = nullptr;
  DeviceBuffer params, grads, opt1, opt2, state, steps;
  DeviceBuffer norms;  // [k]: each learner's gradient norm (--clip-grad-norm only)
  DeviceBuffer z, z_prev, sum, mean, state_avg, flag;   // flag: [1] non-finite values of z
  DeviceBuffer ema, ema_state, ema_sum, ema_state_sum;  // --ema only
  std::any step_params, central_params, state_sum_params, param_sum_params;
  std::any ema_state_params;
  // SmaStep with the pull (sync), without (local), and without with the weight average of the
  // rows' mean (alpha 0 with --ema); SmaCentralStep; the SmaRowSums; the SmaRowEma of the BN
  // statistics.
  KernelArgs sync_args, local_args, local_ema_args, central_args, state_sum_args, param_sum_args;
  KernelArgs ema_state_args;
  Event updated;
  std::exception_ptr error;
  double bad_z = 0;  // the last z update: non-finite values of z (agreed over the job)
  Worker driver;     // last: joined before the rest is destroyed

  // z set to the model's initial values, and the step's optimizer settings. With --ema, the
  // averages start as the initial model; where they are parts of a sum over the devices (`first`:
  // this is the job's first device), only the first holds it and the others hold zeros (the BN
  // statistics always; the parameters when `ema_parts`).
  void init(const TrainModel& m, const TrainerOptions& o, bool first, bool ema_parts);
  // The averages restart from the model evaluation uses now (after the trainer's
  // average_for_eval): e of z <- z, or the parts <- the mean on the first device, zeros elsewhere.
  void seed_ema(int64_t P, int64_t S, bool first, bool parts);
  // k learners in place of `old`: the first min(k, old) keep their rows, the others start from
  // z with the averaged statistics and zero optimizer state; with `seed_z`, z and z_prev first
  // become the learners' mean. `pull`: z moves (z_prev and sum are held, z_prev = z when they
  // are made); `with_mean`: the job has more than one learner (mean is held). Makes the kernel
  // arguments over the new buffers.
  void resize(const TrainModel& m, int k, int old, bool adamw, bool seed_z, bool pull,
              bool with_mean);
  // The learners' average: mean, or with one learner in the job its row.
  const float* learners_mean() const { return mean.get() ? mean.f32() : params.f32(); }
  // Every replica <- z; optimizer state and step counts zeroed.
  void reset_to_central(int64_t P, int k);
  // Every replica <- z (launched on the synchronisation stream; the optimizer state is kept).
  void set_rows_to_z(int64_t P, int k);
  // Host copies of row r of a [k][len] buffer, and learner r's whole state.
  std::vector<float> row(const DeviceBuffer& b, int r, int64_t len) const;
  LearnerState learner(int r, int64_t P, int64_t S) const;
  // Uploads the central model and learners[first + r] into row r, r < k.
  void load(const std::vector<float>& z_in, const std::vector<float>& z_prev_in,
            const std::vector<LearnerState>& learners, size_t first, int k, int64_t P, int64_t S);
  // Copies a [len] buffer on the device's synchronisation stream.
  void copy(void* dst, const void* src, int64_t len);
};

}  // namespace cb
