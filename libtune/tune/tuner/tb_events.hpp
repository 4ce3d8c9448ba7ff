// TensorBoard's event files, written by libtune itself (issue 43: a trial's results as
// TensorBoard shows them, with no TensorFlow or protobuf library). The format is small:
// a file of records, each
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes |
//   `length` bytes of an Event protobuf | uint32 masked CRC-32C of them
// (masked: rotated right by 15 bits plus 0xa282ead8, as TensorFlow's record writer
// does). The Event messages are encoded here by hand, only the fields libtune writes:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// A file starts with an Event whose file_version is "brain.Event:2"; its name is
// events.out.tfevents.<seconds>.<host>.<pid>.<n> (TensorBoard reads every such file of a
// folder, in the order of their names).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tune/core/status.hpp"

namespace tune::tb {

// CRC-32C (Castagnoli), and its masked form as records carry it.
// (SSE 4.2's instruction where the processor has it, else a table; the table's always
// for crc32c_portable, which the tests compare.)
uint32_t crc32c(std::string_view bytes);
uint32_t crc32c_portable(std::string_view bytes);
uint32_t masked_crc32c(std::string_view bytes);

// One record around an encoded Event.
std::string record(std::string_view event);

// Encoded Events: the file's first (its version), and one scalar.
std::string version_event(double wall_time);
std::string scalar_event(std::string_view tag, int64_t step, double value, double wall_time);
// Several scalars of one step in one Event (one summary value each, as TensorFlow 1's
// merged summaries wrote them): one record per result, not one per metric.
std::string scalars_event(std::span<const std::string_view> tags, std::span<const double> values, int64_t step,
                          double wall_time);

// The same, fast, for results whose metrics' names repeat: each tag's bytes before its
// value encoded once (scalar_prefixes), then each result's record appended to `out`
// (append_scalars_record: the bytes of record(scalars_event(...))).
std::vector<std::string> scalar_prefixes(std::span<const std::string> tags);
void append_scalars_record(std::string& out, std::span<const std::string> prefixes, std::span<const double> values,
                           int64_t step, double wall_time);

// TensorBoard's HParams view: a trial (a run folder) is a session whose start names its
// hyperparameters and whose end says how it ended. TensorBoard builds the view's table
// from the sessions of an experiment's folders and their scalars (no experiment summary
// is needed). These are Events with a summary value tagged "_hparams_/session_start_info"
// or "_hparams_/session_end_info", whose metadata carries the hparams plugin's
// HParamsPluginData (tensorboard/plugins/hparams/plugin_data.proto):
//   SessionStartInfo { map<string, google.protobuf.Value> hparams = 1; string group_name = 4;
//                      double start_time_secs = 5; }
//   SessionEndInfo   { Status status = 1; double end_time_secs = 2; }
struct hparam {
  std::string name;
  std::variant<double, std::string, bool> value;
};
enum class session_status { unknown = 0, success = 1, failure = 2, running = 3 };
std::string session_start_event(const std::vector<hparam>& hparams, std::string_view group, double wall_time);
std::string session_end_event(session_status status, double wall_time);

// An event file, appended record by record through a buffer, written out by flush() (and
// when the buffer fills; a reader of a file being written waits for the rest of a
// record it sees in part, as TensorBoard's does). A new file each time: it never appends
// to a file whose last record a crash may have cut.
class event_writer {
 public:
  // Makes `dir` (and its parents) and the file in it; the error names the path.
  static expected<std::unique_ptr<event_writer>> open(const std::string& dir, double wall_time,
                                                      const std::string& host);
  ~event_writer();
  event_writer(const event_writer&) = delete;
  event_writer& operator=(const event_writer&) = delete;

  status scalar(std::string_view tag, int64_t step, double value, double wall_time);
  // Several scalars of a step, from their tags' prefixes (scalar_prefixes).
  status scalars(std::span<const std::string> prefixes, std::span<const double> values, int64_t step, double wall_time);
  status session_start(const std::vector<hparam>& hparams, std::string_view group, double wall_time);
  status session_end(session_status status, double wall_time);
  status flush();
  const std::string& path() const { return path_; }

 private:
  event_writer() = default;
  status write(const std::string& event);
  status spill();  // the buffer to the file when it is large
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string buffer_;  // whole records not yet written
};

}  // namespace tune::tb
