#include "tune/host/detect.hpp"

#include <gtest/gtest.h>

#include <set>

namespace tune {
namespace {

TEST(Detect, HostHasCpusAndMemory) {
  auto h = detect_host();
  EXPECT_FALSE(h.hostname.empty());
  EXPECT_GE(h.cpus, quantity::whole(1));
  EXPECT_GT(h.memory, 0);
  auto n = local_node_resources(h);
  ASSERT_TRUE(n) << n.error().message();
  EXPECT_EQ(n->total().cpu(), h.cpus);
  EXPECT_EQ(n->gpus().size(), h.gpu.gpus.size());
}

TEST(Detect, GpusAreInPciOrderWithDistinctUuids) {
  auto probe = detect_gpus();
  if (probe.gpus.empty()) GTEST_SKIP() << "no GPU here: " << probe.note;
  std::set<std::string> uuids;
  for (size_t i = 0; i < probe.gpus.size(); ++i) {
    const auto& g = probe.gpus[i];
    EXPECT_EQ(g.index, static_cast<int32_t>(i));
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    EXPECT_GT(g.memory_total, 0);
    EXPECT_FALSE(g.name.empty());
    EXPECT_FALSE(g.logical);
    if (i > 0) {
      EXPECT_LT(probe.gpus[i - 1].pci_bus_id, g.pci_bus_id);
    }
    uuids.insert(g.uuid);
  }
  EXPECT_EQ(uuids.size(), probe.gpus.size());
}

TEST(Detect, LogicalGpusAreMarked) {
  auto g = logical_gpus("box", 3, int64_t{16} << 30);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_TRUE(g[2].logical);
  EXPECT_EQ(g[2].uuid, "LOGICAL-box-2");
  EXPECT_TRUE(node_resources::make({}, g));
}

}  // namespace
}  // namespace tune
