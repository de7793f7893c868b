// cuda_devices_of (cuda_device.h): the GPUs a --devices spec names.
#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_device.h"
#include "runtime/error.h"

namespace cb {

std::vector<int> cuda_devices_of(const std::string& spec, const std::string& option) {
  auto malformed = [&]() {
    fail("{} '{}': expected cuda (every GPU) or cuda:I,J,... (GPU ordinals, e.g. cuda:0,1)", option,
         spec);
  };
  std::vector<int> ids;
  if (spec != "cuda") {
    if (spec.rfind("cuda:", 0) != 0 || spec.size() == 5) malformed();
    size_t pos = 5;
    while (pos <= spec.size()) {
      const size_t comma = std::min(spec.find(',', pos), spec.size());
      const std::string item = spec.substr(pos, comma - pos);
      if (item.empty() || item.size() > 4 ||
          !std::all_of(item.begin(), item.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        malformed();
      const int id = std::stoi(item);
      if (std::find(ids.begin(), ids.end(), id) != ids.end())
        fail("{} '{}': cuda:{} is named twice", option, spec, id);
      ids.push_back(id);
      pos = comma + 1;
    }
  }
  std::string why;
  const int n = cuda_device_count(&why);
  if (n == 0) fail("{} {}: {}. Use the CPU instead ({} cpu)", option, spec, why, option);
  if (ids.empty())
    for (int i = 0; i < n; ++i) ids.push_back(i);
  for (int id : ids)
    if (id >= n)
      fail("{} '{}': there is no cuda:{} (this machine has {} GPU{}: cuda:0{})", option, spec, id,
           n, n == 1 ? "" : "s", n == 1 ? "" : fmt::format(" to cuda:{}", n - 1));
  return ids;
}

}  // namespace cb
