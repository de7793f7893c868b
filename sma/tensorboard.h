// TensorBoard event files, written without TensorFlow: `tensorboard --logdir DIR` shows a run
// live. A file DIR/events.out.tfevents.<seconds>.<host>.<pid> holds TFRecord-framed records
//   uint64 length, uint32 masked CRC-32C of the length, the bytes, uint32 masked CRC-32C of them
// (masked: ((crc >> 15) | (crc << 17)) + 0xa282ead8), each an `Event` protobuf (tensorflow/core/
// util/event.proto): the first says file_version "brain.Event:2", the others carry a `Summary` of
// scalars (tag, simple_value) at a step. The protobuf is encoded by hand: the fields used are
//   Event:   1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (Summary)
//   Summary: 1 value (repeated Value);  Value: 1 tag (string), 2 simple_value (float).
// Every record is flushed as it is written, so a reader sees it at once and a crash loses at most
// the record being written.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace cb {

class EventWriter {
 public:
  // Creates `dir` (and parents) and a new event file in it. Throws cb::Error naming the path.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event at `step` with these scalars (tag, value); throws cb::Error when the write fails
  // (a full disk), naming the file.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& bytes);
  std::string path_;
  std::FILE* f_ = nullptr;
};

// What a reader of event files finds: the events of one file, after checking every record's
// framing and both CRCs. Throws cb::Error naming the file and the record at fault.
struct ScalarEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                            // the first event's
  std::vector<std::pair<std::string, float>> scalars;  // tag, simple_value
};
std::vector<ScalarEvent> read_event_file(const std::string& path);

}  // namespace cb
