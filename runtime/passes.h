// Graph passes that run after import, each a function over the IR.
#pragma once

#include <cstdint>

#include "runtime/graph.h"

namespace cb {

struct FoldStats {
  int64_t folded = 0;  // nodes whose outputs were all known (constants, shape arithmetic)
  int64_t dead = 0;    // nodes none of whose outputs reach a graph output
};

// Replaces every node of an op with a decomposition (OpDef::lower: LSTM, GRU, RNN, If, Einsum)
// by the nodes it emits, in the node's place, its output values kept (now produced by the
// decomposition). Runs on an inferred graph; returns the number of nodes replaced.
int64_t lower_composites(Graph& g);

// Replaces nodes whose outputs are all known before execution by constant values (data where
// the contents are static, `known` dims where they depend on N), removes nodes that do not
// reach a graph output, and drops values nothing refers to anymore. Keeps topological order.
FoldStats fold_and_prune(Graph& g);

// Initializers become Parameter (float, used in a differentiable slot), State (BatchNorm running
// statistics) or Constant (everything else), from the op catalog's input traits.
void classify_initializers(Graph& g);

// --freeze: parameters whose name matches any of the shell patterns (fnmatch: * ? [..]) become
// constants. Returns how many tensors were frozen; a pattern that matches no parameter is an
// error naming it and a few parameter names.
int64_t freeze_parameters(Graph& g, const std::vector<std::string>& patterns);

// Training mode (BatchNorm on batch statistics, Dropout active) or evaluation mode (running
// statistics, Dropout the identity), whatever mode the model was exported in.
void set_training(Graph& g, bool training);

}  // namespace cb
