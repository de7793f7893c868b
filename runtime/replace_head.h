// Fine-tuning with a new head (cb-train --num-classes K): the classifier that computes a graph
// output's logits is replaced by a freshly initialised K-way one, in the IR, before training.
//
// The search starts at the output and walks back through the ops that keep the class axis
// (Softmax, LogSoftmax, Identity, Dropout, Flatten, Reshape, Squeeze) to the first Gemm, MatMul
// (+ Add bias) or Conv (a 1x1 one, or any kernel whose output the walk flattens to [N,C]); its
// weight and bias must be stored values (initializers or Constant nodes), read by no other node.
// They keep their names (so --freeze patterns, checkpoints and the export find them) and get
// K-sized contents drawn as PyTorch initialises nn.Linear and nn.Conv2d: weight and bias
// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a = sqrt(5)), from a generator
// seeded with `seed`. A Reshape after the classifier whose shape constant names the old class
// count (a [-1,1000] or [N,1000]) gets K instead, and every node downstream is inferred again.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/graph.h"

namespace cb {

struct HeadReplacement {
  std::string output;    // the graph output whose class count changed
  std::string node;      // the classifier's node
  std::string name;      // what to call it: PyTorch's module ('fc'), else the node's name
  std::string op;        // "Gemm", "MatMul+Add", "MatMul", "Conv 1x1"
  int64_t features = 0;  // fan_in: the inputs of one class's unit
  int64_t classes_before = 0, classes = 0;
  std::string weight, bias;  // value names ("" when there is no bias)
  // Every value whose contents changed, by name, with its new contents: the new weight and bias
  // and the shape constants fixed after the head (an entry in terms of the batch written as -1).
  // What an export writes over the model file's tensors, dims included.
  std::map<std::string, Tensor> values;

  // "classifier 'fc' (Gemm 512->1000) replaced by a new 512->10 head"
  std::string describe() const;
};

// Replaces the classifier of graph output `output` ("" = the graph's first output) by a new
// `classes`-way one, as described above. Throws cb::Error when `classes` < 2 (with the hint for
// one output), when the output is missing, or when no supported classifier is found (naming the
// output, the node where the search stopped, and what is supported); the graph is then unchanged.
HeadReplacement replace_head(Graph& g, const std::string& output, int64_t classes, uint64_t seed);

}  // namespace cb
