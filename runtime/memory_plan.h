// The memory planner: a pure function from a scheduled graph (node order = schedule) and a batch
// size to byte offsets in one arena. Lifetimes come from the schedule; in-place reuse and aliases
// from the op catalog's traits. The plan is the same for every replica: replica r gets its own
// arena of `bytes_peak` bytes. Constants and parameters are not in the arena.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "runtime/graph.h"

namespace cb {

struct MemoryPlan {
  static constexpr int64_t kNotInArena = -1;
  int64_t batch = 0;
  std::vector<int64_t> offset;   // per value: byte offset in the arena, or kNotInArena
  std::vector<int64_t> bytes;    // per value: bytes it occupies (0 when not in the arena)
  std::vector<ValueId> root;     // per value: the value whose buffer it uses (itself if its own)
  std::vector<int> first, last;  // per value: live over nodes [first, last] (-1: before node 0)
  int64_t bytes_peak = 0;        // arena size
  int64_t bytes_naive = 0;       // sum of all activation buffers without any reuse
  int inplace = 0, aliased = 0;  // buffers shared through the op traits

  double reuse_ratio() const {
    return bytes_peak ? static_cast<double>(bytes_naive) / static_cast<double>(bytes_peak) : 1.0;
  }
};

constexpr int64_t kArenaAlign = 64;

// Values that need arena storage: graph inputs and node outputs (not constants/parameters),
// except those in `external` (their storage is bound from outside, e.g. flat gradient buffers).
MemoryPlan plan_memory(const Graph& g, int64_t batch, const std::vector<ValueId>& external = {});

// Throws InternalError if two buffers that are live at the same time overlap.
void check_plan(const Graph& g, const MemoryPlan& p);

void print_plan(std::ostream& os, const Graph& g, const MemoryPlan& p);

}  // namespace cb
