// One device's buffers of the trainer (see device_replicas.h).
#include "sma/device_replicas.h"

#include <algorithm>

#include "sma/model_state.h"
#include "sma/trainer_options.h"

namespace cb {

void DeviceReplicas::copy(void* dst, const void* src, int64_t len) {
  if (len == 0) return;
  KernelArgs a;
  a.in = {flat_f32(src, len)};
  a.out = {flat_f32(dst, len)};
  dev->launch(OpKind::Identity, a);
}

void DeviceReplicas::init(const TrainModel& m, const TrainerOptions& o, bool first,
                          bool ema_parts) {
  const int64_t P = m.flat_elems(), S = m.state_elems();
  z = DeviceBuffer(*dev, TrainModel::buffer_bytes(P));
  state_avg = DeviceBuffer(*dev, TrainModel::buffer_bytes(S));
  flag = DeviceBuffer(*dev, 64);
  m.upload_initial(*dev, z.get(), state_avg.get());
  // mu_z and the scale follow K: the trainer sets them before every central step.
  central_params = ops::SmaCentralStepParams{};
  central_args.params = &central_params;
  if (o.ema) {
    for (DeviceBuffer* b : {&ema, &ema_sum}) *b = DeviceBuffer(*dev, TrainModel::buffer_bytes(P));
    for (DeviceBuffer* b : {&ema_state, &ema_state_sum})
      *b = DeviceBuffer(*dev, TrainModel::buffer_bytes(S));
    const std::vector<float> zeros(static_cast<size_t>(std::max(P, S)), 0.0f);
    m.upload_initial(*dev, ema.get(), ema_state.get());
    if (!first && ema_parts) dev->upload(ema.get(), zeros.data(), static_cast<size_t>(P) * 4);
    if (!first && S > 0) dev->upload(ema_state.get(), zeros.data(), static_cast<size_t>(S) * 4);
    ema_state_params = ops::SmaRowEmaParams{};
  }
  ops::SmaStepParams sp;
  sp.optimizer = o.optimizer;
  sp.momentum = static_cast<float>(o.momentum);
  sp.weight_decay = static_cast<float>(o.weight_decay);
  sp.nesterov = o.nesterov;
  sp.beta1 = static_cast<float>(o.beta1);
  sp.beta2 = static_cast<float>(o.beta2);
  sp.eps = static_cast<float>(o.eps);
  sp.clip_norm = static_cast<float>(o.clip_grad_norm);
  step_params = sp;
}

void DeviceReplicas::resize(const TrainModel& m, int k, int old, bool adamw, bool seed_z, bool pull,
                            bool with_mean) {
  const int64_t P = m.flat_elems(), S = m.state_elems();
  Device& d = *dev;
  auto buf = [&](int64_t elems) { return DeviceBuffer(d, TrainModel::buffer_bytes(elems)); };
  DeviceBuffer new_params = buf(k * P), new_grads = buf(k * P), new_opt1 = buf(k * P),
               new_opt2 = adamw ? buf(k * P) : DeviceBuffer(), new_state = buf(k * S),
               new_steps(d, static_cast<size_t>(k) * sizeof(int64_t));
  const int keep = std::min(k, old);
  copy(new_params.get(), params.get(), keep * P);
  copy(new_opt1.get(), opt1.get(), keep * P);
  if (adamw) copy(new_opt2.get(), opt2.get(), keep * P);
  copy(new_state.get(), state.get(), keep * S);
  if (keep > 0) {
    std::vector<int64_t> s(static_cast<size_t>(keep));
    d.download(s.data(), steps.get(), s.size() * sizeof(int64_t));
    d.upload(new_steps.get(), s.data(), s.size() * sizeof(int64_t));
  }
  // The central buffers this count needs; z_prev starts as z (the momentum of z at rest).
  if (pull && !z_prev.get()) {
    z_prev = buf(P);
    sum = buf(P);
    copy(z_prev.get(), z.get(), P);
  }
  if (seed_z) {
    copy(z.get(), learners_mean(), P);
    copy(z_prev.get(), learners_mean(), P);
  }
  for (int r = keep; r < k; ++r) {
    copy(new_params.f32(r * P), z.get(), P);
    copy(new_state.f32(r * S), state_avg.get(), S);
  }
  updated = d.record_event(kSyncStream);
  d.synchronize();
  if (!pull) {  // z stays put: nothing reads them
    z_prev = DeviceBuffer();
    sum = DeviceBuffer();
  }
  if (with_mean && !mean.get()) mean = buf(P);
  if (!with_mean) mean = DeviceBuffer();  // the one learner's row is its own mean
  params = std::move(new_params);
  grads = std::move(new_grads);
  opt1 = std::move(new_opt1);
  opt2 = std::move(new_opt2);
  state = std::move(new_state);
  steps = std::move(new_steps);
  const bool clip = std::any_cast<const ops::SmaStepParams&>(step_params).clip_norm > 0;
  norms = clip ? DeviceBuffer(d, static_cast<size_t>(k) * sizeof(float)) : DeviceBuffer();
  TensorView steps_view;
  steps_view.data = steps.get();
  steps_view.dtype = DType::I64;
  steps_view.dims = {k};
  local_args.params = sync_args.params = &step_params;
  local_args.in = {flat_f32(grads.get(), k * P)};
  local_args.out = {flat_f32(params.get(), k * P), flat_f32(opt1.get(), k * P),
                    adamw ? flat_f32(opt2.get(), k * P) : TensorView{}, TensorView{}, steps_view};
  if (clip) local_args.out.push_back(flat_f32(norms.get(), k));
  sync_args = local_args;
  central_args.in.clear();
  central_args.out.clear();
  if (pull) {
    sync_args.in.push_back(flat_f32(z.get(), P));
    sync_args.out[3] = flat_f32(sum.get(), P);
    central_args.in = {flat_f32(sum.get(), P)};
    central_args.out = {flat_f32(z.get(), P), flat_f32(z_prev.get(), P), flat_f32(flag.get(), 1)};
    if (ema.get()) central_args.out.push_back(flat_f32(ema.get(), P));
  }
  state_sum_args.params = &state_sum_params;
  state_sum_args.in = {flat_f32(state.get(), k * S)};
  state_sum_args.out = {flat_f32(state_avg.get(), S)};
  param_sum_args = KernelArgs{};
  if (mean.get()) {
    param_sum_args.params = &param_sum_params;
    param_sum_args.in = {flat_f32(params.get(), k * P)};
    param_sum_args.out = {flat_f32(mean.get(), P)};
  }
  if (ema.get()) {
    // alpha 0: the step itself folds the rows' mean into the average (SmaStep's ema output).
    local_ema_args = local_args;
    local_ema_args.out.resize(6);  // norms, or none
    local_ema_args.out.push_back(flat_f32(ema.get(), P));
    ema_state_args.params = &ema_state_params;
    ema_state_args.in = {flat_f32(state.get(), k * S)};
    ema_state_args.out = {flat_f32(ema_state.get(), S)};
  }
}

void DeviceReplicas::seed_ema(int64_t P, int64_t S, bool first, bool parts) {
  const std::vector<float> zeros(static_cast<size_t>(std::max(P, S)), 0.0f);
  if (!parts)
    copy(ema.get(), z.get(), P);
  else if (first)
    copy(ema.get(), learners_mean(), P);
  else
    dev->upload(ema.get(), zeros.data(), static_cast<size_t>(P) * 4);
  if (first)
    copy(ema_state.get(), state_avg.get(), S);
  else if (S > 0)
    dev->upload(ema_state.get(), zeros.data(), static_cast<size_t>(S) * 4);
  dev->synchronize();
}

void DeviceReplicas::set_rows_to_z(int64_t P, int k) {
  for (int r = 0; r < k; ++r) copy(params.f32(r * P), z.get(), P);
}

void DeviceReplicas::reset_to_central(int64_t P, int k) {
  set_rows_to_z(P, k);
  const std::vector<float> zeros(static_cast<size_t>(k * P), 0.0f);
  dev->upload(opt1.get(), zeros.data(), zeros.size() * sizeof(float));
  if (opt2.get()) dev->upload(opt2.get(), zeros.data(), zeros.size() * sizeof(float));
  const std::vector<int64_t> zero_steps(static_cast<size_t>(k), 0);
  dev->upload(steps.get(), zero_steps.data(), zero_steps.size() * sizeof(int64_t));
  updated = dev->record_event(kSyncStream);
  dev->synchronize();
}

std::vector<float> DeviceReplicas::row(const DeviceBuffer& b, int r, int64_t len) const {
  std::vector<float> f(static_cast<size_t>(len));
  if (len > 0) dev->download(f.data(), b.f32(r * len), f.size() * sizeof(float));
  return f;
}

LearnerState DeviceReplicas::learner(int r, int64_t P, int64_t S) const {
  LearnerState ls;
  ls.params = row(params, r, P);
  ls.opt1 = row(opt1, r, P);
  if (opt2.get()) ls.opt2 = row(opt2, r, P);
  ls.state = row(state, r, S);
  dev->download(&ls.steps, static_cast<const int64_t*>(steps.get()) + r, sizeof(int64_t));
  return ls;
}

void DeviceReplicas::load(const std::vector<float>& z_in, const std::vector<float>& z_prev_in,
                          const std::vector<LearnerState>& learners, size_t first, int k, int64_t P,
                          int64_t S) {
  dev->upload(z.get(), z_in.data(), z_in.size() * sizeof(float));
  if (z_prev.get())  // held only while z moves (else z_prev is z's and nothing reads it)
    dev->upload(z_prev.get(), z_prev_in.data(), z_prev_in.size() * sizeof(float));
  std::vector<int64_t> s;
  for (int r = 0; r < k; ++r) {
    const LearnerState& l = learners[first + static_cast<size_t>(r)];
    dev->upload(params.f32(r * P), l.params.data(), l.params.size() * sizeof(float));
    dev->upload(opt1.f32(r * P), l.opt1.data(), l.opt1.size() * sizeof(float));
    if (opt2.get()) dev->upload(opt2.f32(r * P), l.opt2.data(), l.opt2.size() * sizeof(float));
    if (S > 0) dev->upload(state.f32(r * S), l.state.data(), l.state.size() * sizeof(float));
    s.push_back(l.steps);
  }
  dev->upload(steps.get(), s.data(), s.size() * sizeof(int64_t));
  updated = dev->record_event(kSyncStream);
  dev->synchronize();
}

}  // namespace cb
