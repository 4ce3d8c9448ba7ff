#include "tb_events.hpp"

#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <unistd.h>
#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace tune::tb {

namespace {

// The table of the reflected Castagnoli polynomial.
constexpr std::array<uint32_t, 256> crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto table = crc_table();

// Protocol buffers' wire encoding, the few pieces Events need.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void key(std::string& out, int field, int wire_type) { varint(out, static_cast<uint64_t>(field) << 3 | wire_type); }

template <class T>
void little_endian(std::string& out, T v) {
  char bytes[sizeof(T)];
  for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(bytes, sizeof(T));
}

void length_delimited(std::string& out, int field, std::string_view bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out.append(bytes);
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  key(e, 1, 1);  // wall_time: double
  little_endian(e, std::bit_cast<uint64_t>(wall_time));
  if (step != 0) {
    key(e, 2, 0);  // step: int64 (two's complement as a varint)
    varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

void fixed_double(std::string& out, int field, double v) {
  key(out, field, 1);
  little_endian(out, std::bit_cast<uint64_t>(v));
}

// A google.protobuf.Value: number_value = 2, string_value = 3, bool_value = 4.
std::string value_of(const std::variant<double, std::string, bool>& v) {
  std::string out;
  if (auto* d = std::get_if<double>(&v)) {
    fixed_double(out, 2, *d);
  } else if (auto* s = std::get_if<std::string>(&v)) {
    length_delimited(out, 3, *s);
  } else {
    key(out, 4, 0);
    varint(out, std::get<bool>(v) ? 1 : 0);
  }
  return out;
}

// An Event whose summary holds one hparams plugin value: tag, the plugin's null tensor
// (a float vector of length 0, as TensorBoard writes it), metadata { plugin_data {
// plugin_name "hparams", content } }.
std::string hparams_event(std::string_view tag, const std::string& plugin_data, double wall_time) {
  std::string plugin;
  length_delimited(plugin, 1, "hparams");
  length_delimited(plugin, 2, plugin_data);
  std::string metadata;
  length_delimited(metadata, 1, plugin);
  std::string v;
  length_delimited(v, 1, tag);
  length_delimited(v, 8, std::string_view{"\x08\x01\x12\x02\x12\x00", 6});
  length_delimited(v, 9, metadata);
  std::string summary;
  length_delimited(summary, 1, v);
  auto e = event_head(wall_time, 0);
  length_delimited(e, 5, summary);
  return e;
}

}  // namespace

uint32_t crc32c_portable(std::string_view bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

#if defined(__x86_64__)
namespace {
// SSE 4.2's crc32 instruction computes CRC-32C (the same polynomial), eight bytes a step:
// the events' checksums cost next to nothing per result.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(std::string_view bytes) {
  uint64_t c = 0xffffffffu;
  const char* p = bytes.data();
  size_t n = bytes.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
  }
  auto c32 = static_cast<uint32_t>(c);
  for (; n > 0; ++p, --n) c32 = _mm_crc32_u8(c32, static_cast<unsigned char>(*p));
  return c32 ^ 0xffffffffu;
}
const bool has_sse42 = __builtin_cpu_supports("sse4.2");
}  // namespace
#endif

uint32_t crc32c(std::string_view bytes) {
#if defined(__x86_64__)
  if (has_sse42) return crc32c_sse42(bytes);
#endif
  return crc32c_portable(bytes);
}

uint32_t masked_crc32c(std::string_view bytes) {
  uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string record(std::string_view event) {
  std::string out, len;
  little_endian(len, static_cast<uint64_t>(event.size()));
  out.append(len);
  little_endian(out, masked_crc32c(len));
  out.append(event);
  little_endian(out, masked_crc32c(event));
  return out;
}

std::string version_event(double wall_time) {
  auto e = event_head(wall_time, 0);
  length_delimited(e, 3, "brain.Event:2");
  return e;
}

std::string scalar_event(std::string_view tag, int64_t step, double value, double wall_time) {
  return scalars_event({&tag, 1}, {&value, 1}, step, wall_time);
}

std::string scalars_event(std::span<const std::string_view> tags, std::span<const double> values, int64_t step,
                          double wall_time) {
  std::string summary, v;
  for (size_t i = 0; i < tags.size() && i < values.size(); ++i) {
    v.clear();
    length_delimited(v, 1, tags[i]);
    key(v, 2, 5);  // simple_value: float
    little_endian(v, std::bit_cast<uint32_t>(static_cast<float>(values[i])));
    length_delimited(summary, 1, v);
  }
  auto e = event_head(wall_time, step);
  length_delimited(e, 5, summary);
  return e;
}

std::vector<std::string> scalar_prefixes(std::span<const std::string> tags) {
  std::vector<std::string> out;
  for (const auto& tag : tags) {
    std::string v;  // Value { tag = 1; simple_value = 2 (its key; the float follows) }
    length_delimited(v, 1, tag);
    key(v, 2, 5);
    std::string p;  // Summary's value = 1: key, length, then v's bytes
    key(p, 1, 2);
    varint(p, v.size() + 4);
    p += v;
    out.push_back(std::move(p));
  }
  return out;
}

namespace {
size_t varint_size(uint64_t v) {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}
}  // namespace

void append_scalars_record(std::string& out, std::span<const std::string> prefixes, std::span<const double> values,
                           int64_t step, double wall_time) {
  size_t n = std::min(prefixes.size(), values.size());
  size_t summary = 0;
  for (size_t i = 0; i < n; ++i) summary += prefixes[i].size() + 4;
  size_t event = 9 + (step != 0 ? 1 + varint_size(static_cast<uint64_t>(step)) : 0) + 1 + varint_size(summary) + summary;
  size_t at = out.size();
  little_endian(out, static_cast<uint64_t>(event));
  little_endian(out, masked_crc32c(std::string_view{out}.substr(at, 8)));
  size_t body = out.size();
  out.push_back(static_cast<char>(0x09));  // wall_time
  little_endian(out, std::bit_cast<uint64_t>(wall_time));
  if (step != 0) {
    out.push_back(static_cast<char>(0x10));  // step
    varint(out, static_cast<uint64_t>(step));
  }
  out.push_back(static_cast<char>(0x2a));  // summary
  varint(out, summary);
  for (size_t i = 0; i < n; ++i) {
    out += prefixes[i];
    little_endian(out, std::bit_cast<uint32_t>(static_cast<float>(values[i])));
  }
  little_endian(out, masked_crc32c(std::string_view{out}.substr(body)));
}

std::string session_start_event(const std::vector<hparam>& hparams, std::string_view group, double wall_time) {
  std::string info;
  for (auto& h : hparams) {
    std::string entry;
    length_delimited(entry, 1, h.name);
    length_delimited(entry, 2, value_of(h.value));
    length_delimited(info, 1, entry);
  }
  if (!group.empty()) length_delimited(info, 4, group);
  fixed_double(info, 5, wall_time);
  std::string data;  // HParamsPluginData { version 0 (left out); session_start_info = 3 }
  length_delimited(data, 3, info);
  return hparams_event("_hparams_/session_start_info", data, wall_time);
}

std::string session_end_event(session_status status, double wall_time) {
  std::string info;
  if (status != session_status::unknown) {
    key(info, 1, 0);
    varint(info, static_cast<uint64_t>(status));
  }
  fixed_double(info, 2, wall_time);
  std::string data;  // session_end_info = 4
  length_delimited(data, 4, info);
  return hparams_event("_hparams_/session_end_info", data, wall_time);
}

expected<std::unique_ptr<event_writer>> event_writer::open(const std::string& dir, double wall_time,
                                                           const std::string& host) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return status{errc::invalid_argument, "cannot make the TensorBoard folder " + dir + ": " + ec.message()};
  std::unique_ptr<event_writer> w{new event_writer};
  // As TensorFlow names them: its time, host, process and a count, so that a trial that
  // starts again (even within the same second) writes a file of its own beside the last.
  static std::atomic<uint64_t> opened{0};
  w->path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(std::floor(wall_time))) + "." + host +
             "." + std::to_string(::getpid()) + "." + std::to_string(opened++);
  w->file_ = std::fopen(w->path_.c_str(), "wbx");
  if (!w->file_) return status{errc::invalid_argument, "cannot write " + w->path_ + ": " + std::strerror(errno)};
  if (auto s = w->write(version_event(wall_time)); !s) return s;
  if (auto s = w->flush(); !s) return s;
  return w;
}

event_writer::~event_writer() {
  if (!file_) return;
  (void)flush();
  std::fclose(file_);
}

status event_writer::scalar(std::string_view tag, int64_t step, double value, double wall_time) {
  return write(scalar_event(tag, step, value, wall_time));
}

status event_writer::session_start(const std::vector<hparam>& hparams, std::string_view group, double wall_time) {
  return write(session_start_event(hparams, group, wall_time));
}

status event_writer::session_end(session_status status, double wall_time) {
  return write(session_end_event(status, wall_time));
}

status event_writer::scalars(std::span<const std::string> prefixes, std::span<const double> values, int64_t step,
                             double wall_time) {
  append_scalars_record(buffer_, prefixes, values, step, wall_time);
  return spill();
}

status event_writer::write(const std::string& event) {
  buffer_ += record(event);
  return spill();
}

status event_writer::spill() {
  return buffer_.size() < (size_t{1} << 16) ? status::ok() : flush();
}

status event_writer::flush() {
  if (!buffer_.empty() && std::fwrite(buffer_.data(), 1, buffer_.size(), file_) != buffer_.size())
    return {errc::invalid_argument, "cannot write " + path_ + ": " + std::strerror(errno)};
  buffer_.clear();
  if (std::fflush(file_) != 0) return {errc::invalid_argument, "cannot write " + path_ + ": " + std::strerror(errno)};
  return status::ok();
}

}  // namespace tune::tb
