// TensorBoard's event files as libtune writes them: the checksum against the published
// test vectors, the record framing, and the Events' bytes against what protobuf's own
// encoder gives for the same fields (written out below from TensorFlow's event.proto).
#include "tb_events.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tune::tb {
namespace {

std::string hex(std::string_view b) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : b) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

TEST(TbEvents, Crc32cIsCastagnolisOnItsTestVectors) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);                // the check value of CRC-32C
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);      // RFC 3720, B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62a8ab43u);    // 32 bytes of ones
  EXPECT_EQ(crc32c(""), 0u);
  // The processor's instruction and the table agree, on every length and alignment.
  std::string bytes;
  for (int i = 0; i < 300; ++i) bytes.push_back(static_cast<char>(i * 7 + 3));
  for (size_t from = 0; from < 9; ++from)
    for (size_t n = 0; n + from <= bytes.size(); n += 13)
      EXPECT_EQ(crc32c(std::string_view{bytes}.substr(from, n)), crc32c_portable(std::string_view{bytes}.substr(from, n)));
  EXPECT_EQ(crc32c_portable("123456789"), 0xe3069283u);
  uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TbEvents, ARecordIsItsLengthItsChecksumsAndTheEvent) {
  auto r = record("abc");
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(hex(r.substr(0, 8)), "0300000000000000");
  auto le32 = [](uint32_t v) { return std::string{char(v & 255), char(v >> 8 & 255), char(v >> 16 & 255), char(v >> 24)}; };
  EXPECT_EQ(r.substr(8, 4), le32(masked_crc32c(r.substr(0, 8))));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(r.substr(15, 4), le32(masked_crc32c("abc")));
}

TEST(TbEvents, EventsAreTheProtobufEncodingOfTheirFields) {
  // wall_time 1.5 (field 1, fixed64: 09 + 0000000000f83f), file_version (field 3: 1a 0d ...).
  EXPECT_EQ(hex(version_event(1.5)), "09000000000000f83f1a0d" + hex("brain.Event:2"));
  // step 300 (field 2, varint: 10 ac02); summary (field 5: 2a len) { value (field 1: 0a len)
  // { tag (field 1: 0a 04 "loss"), simple_value 0.25f (field 2, fixed32: 15 0000803e) } }.
  EXPECT_EQ(hex(scalar_event("loss", 300, 0.25, 1.5)),
            "09000000000000f83f" "10ac02" "2a0d" "0a0b" "0a04" + hex("loss") + "150000803e");
  // Two scalars of a step: one summary of two values, each as scalar_event's.
  std::string_view tags[] = {"loss", "acc"};
  double values[] = {0.25, 0.5};
  EXPECT_EQ(hex(scalars_event(tags, values, 300, 1.5)),
            "09000000000000f83f" "10ac02" "2a19" "0a0b" "0a04" + hex("loss") + "150000803e" "0a0a" "0a03" + hex("acc") +
                "15" "0000003f");
  // The fast path: the same record's bytes, from the tags' prefixes.
  std::vector<std::string> names{"loss", "acc"};
  auto prefixes = scalar_prefixes(names);
  for (int64_t step : {0, 1, 300, -1}) {
    std::string out = "x";
    append_scalars_record(out, prefixes, values, step, 1.5);
    std::string want = "x";
    want += record(scalars_event(tags, values, step, 1.5));
    EXPECT_EQ(out, want) << step;
  }
  // A negative step is a ten-byte varint, as protobuf writes an int64.
  EXPECT_EQ(hex(scalar_event("x", -1, 0, 0)).substr(18, 22), "10ffffffffffffffffff01");
}

// The HParams view's session events, byte for byte as TensorBoard 2.21's own protobuf
// classes encode the same messages (plugin_data_pb2.HParamsPluginData with
// metadata.create_summary_metadata and metadata.NULL_TENSOR, in an event_pb2.Event; one
// hyperparameter each, since a map's order is the encoder's own).
TEST(TbEvents, SessionEventsAreWhatTensorBoardsHparamsPluginEncodes) {
  EXPECT_EQ(hex(session_end_event(session_status::failure, 1.5)),
            "09000000000000f83f2a420a400a1a5f68706172616d735f2f73657373696f6e5f656e645f696e666f4206080112021200"
            "4a1a0a180a0768706172616d73120d220b080211000000000000f83f");
  EXPECT_EQ(hex(session_start_event({{"lr", 0.25}}, "g", 1.5)),
            "09000000000000f83f2a560a540a1c5f68706172616d735f2f73657373696f6e5f73746172745f696e666f4206080112021200"
            "4a2c0a2a0a0768706172616d73121f1a1d0a0f0a026c72120911000000000000d03f22016729000000000000f83f");
  EXPECT_EQ(hex(session_start_event({{"model", std::string{"mlp"}}}, "", 1.5)),
            "09000000000000f83f2a520a500a1c5f68706172616d735f2f73657373696f6e5f73746172745f696e666f4206080112021200"
            "4a280a260a0768706172616d73121b1a190a0e0a056d6f64656c12051a036d6c7029000000000000f83f");
  EXPECT_EQ(hex(session_start_event({{"bn", true}}, "", 1.5)),
            "09000000000000f83f2a4c0a4a0a1c5f68706172616d735f2f73657373696f6e5f73746172745f696e666f4206080112021200"
            "4a220a200a0768706172616d7312151a130a080a02626e1202200129000000000000f83f");
}

TEST(TbEvents, AWriterAppendsWholeRecordsToANewFileInItsFolder) {
  auto dir = std::filesystem::temp_directory_path() / ("tb_events_test_" + std::to_string(::getpid())) / "trial-1";
  auto w = event_writer::open(dir.string(), 1700000000.25, "host-a");
  ASSERT_TRUE(w) << w.error().message();
  auto prefix = dir.string() + "/events.out.tfevents.1700000000.host-a." + std::to_string(::getpid()) + ".";
  EXPECT_EQ((*w)->path().substr(0, prefix.size()), prefix);
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string{std::istreambuf_iterator<char>(in), {}};
  };
  EXPECT_EQ(read((*w)->path()), record(version_event(1700000000.25)));  // the version at once
  ASSERT_TRUE((*w)->scalar("val_acc", 1, 0.5, 1700000001.0));
  ASSERT_TRUE((*w)->flush());
  EXPECT_EQ(read((*w)->path()), record(version_event(1700000000.25)) + record(scalar_event("val_acc", 1, 0.5, 1700000001.0)));
  // Opened again in the same second: a file of its own.
  auto again = event_writer::open(dir.string(), 1700000000.25, "host-a");
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_NE((*again)->path(), (*w)->path());
  w->reset();
  std::filesystem::remove_all(dir.parent_path());
  auto bad = event_writer::open("/proc/no/such/folder", 0, "h");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message().find("/proc/no/such/folder"), std::string::npos) << bad.error().message();
}

}  // namespace
}  // namespace tune::tb
