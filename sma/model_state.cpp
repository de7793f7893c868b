// The trained model a saved ModelState holds (model_tensors, sma/model_state.h), computed on the
// host in the order the trainer's kernels and collective compute it, so that cb-export of a
// checkpoint writes the same bytes as the run itself.
#include "sma/model_state.h"

#include <map>
#include <string>
#include <vector>

#include "runtime/copy_bytes.h"
#include "runtime/error.h"

namespace cb {

std::map<std::string, Tensor> model_tensors(const TrainModel& m, const ModelState& s) {
  const size_t P = static_cast<size_t>(m.flat_elems()), S = static_cast<size_t>(m.state_elems());
  const size_t k = static_cast<size_t>(s.learners_per_device), n = s.learners.size();
  if (k < 1 || n == 0 || n % k != 0 || s.z.size() != P)
    fail("the saved state ({} values per replica, {} learners) does not fit the model ({} values)",
         s.z.size(), n, P);
  for (const LearnerState& l : s.learners)
    if (l.params.size() != P || l.state.size() != S)
      fail("the saved learners' buffers do not fit the model");
  // As SmaRowSum (y = scale * x_0, then y = y + scale * x_r) on each device, then the devices'
  // sums added in device order (the collective's all-reduce).
  const float scale = static_cast<float>(1.0 / static_cast<double>(n));
  auto average = [&](size_t len, auto row) {
    std::vector<float> total(len, 0.0f), dev(len);
    for (size_t d = 0; d < n / k; ++d) {
      const std::vector<float>& x0 = row(d * k);
      for (size_t i = 0; i < len; ++i) dev[i] = scale * x0[i];
      for (size_t r = 1; r < k; ++r) {
        const std::vector<float>& x = row(d * k + r);
        for (size_t i = 0; i < len; ++i) dev[i] = dev[i] + scale * x[i];
      }
      if (d == 0)
        total = dev;
      else
        for (size_t i = 0; i < len; ++i) total[i] += dev[i];
    }
    return total;
  };
  // The weight average: its parts added in device order (the collective's all-reduce).
  auto parts = [&](const std::vector<std::vector<float>>& v, size_t len) {
    if (v.size() != n / k)
      fail("the saved weight average has {} parts for {} devices", v.size(), n / k);
    for (const std::vector<float>& x : v)
      if (x.size() != len) fail("the saved weight average does not fit the model");
    std::vector<float> total = v[0];
    for (size_t d = 1; d < v.size(); ++d)
      for (size_t i = 0; i < len; ++i) total[i] += v[d][i];
    return total;
  };
  const bool ema = !s.ema.empty();
  const std::vector<float> params =
      ema ? (s.model_is_mean ? parts(s.ema, P) : s.ema.at(0))
      : s.model_is_mean
          ? average(P, [&](size_t l) -> const std::vector<float>& { return s.learners[l].params; })
          : s.z;
  const std::vector<float> state =
      ema ? parts(s.ema_state, S)
          : average(S, [&](size_t l) -> const std::vector<float>& { return s.learners[l].state; });
  std::map<std::string, Tensor> out;
  auto put = [&](const std::vector<FlatSlot>& slots, const std::vector<float>& flat) {
    for (const FlatSlot& slot : slots) {
      const Value& v = m.training_graph().graph.value(slot.value);
      Tensor t;
      t.dtype = DType::F32;
      t.dims = m.slot_dims(slot);
      t.bytes.resize(static_cast<size_t>(slot.numel) * sizeof(float));
      copy_bytes(t.bytes.data(), flat.data() + slot.offset, t.bytes.size());
      out.emplace(v.name, std::move(t));
    }
  };
  put(m.param_slots(), params);
  put(m.state_slots(), state);
  return out;
}

}  // namespace cb
