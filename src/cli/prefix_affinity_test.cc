#include "cli/prefix_affinity.h"

#include <gtest/gtest.h>

#include <string>

namespace gyre::cli {
namespace {

using nlohmann::json;

json Chat(int turns, const std::string& topic) {
  json msgs = json::array();
  msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant who answers at length about " + topic}});
  for (int t = 0; t < turns; ++t) {
    msgs.push_back({{"role", "user"}, {"content", "Question " + std::to_string(t) + " about " + topic + ": " +
                                                      std::string(300, static_cast<char>('a' + t % 26))}});
    msgs.push_back({{"role", "assistant"}, {"content", "Answer " + std::to_string(t) + std::string(200, 'x')}});
  }
  return {{"model", "m"}, {"messages", msgs}};
}

TEST(PromptKey, ANextTurnExtendsTheLastOne) {
  const std::string k1 = PromptKey(Chat(1, "rivers")), k2 = PromptKey(Chat(2, "rivers"));
  ASSERT_FALSE(k1.empty());
  EXPECT_GT(k2.size(), k1.size());
  EXPECT_EQ(k2.compare(0, k1.size(), k1), 0);
  EXPECT_NE(PromptKey(Chat(1, "mountains")).compare(0, k1.size(), k1), 0);
  // Tools and the model are part of the key: the template puts them first.
  json with_tools = Chat(1, "rivers");
  with_tools["tools"] = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  EXPECT_NE(PromptKey(with_tools).compare(0, k1.size(), k1), 0);
  json other_model = Chat(1, "rivers");
  other_model["model"] = "n";
  EXPECT_NE(PromptKey(other_model), k1);
}

TEST(PromptKey, CompletionsAndRefusedShapes) {
  EXPECT_EQ(PromptKey(json{{"model", "m"}, {"prompt", "abc"}}), std::string("m\x1d") + "abc");
  EXPECT_EQ(PromptKey(json{{"model", "m"}, {"prompt", {1, 2, 3}}}), std::string("m\x1d") + "1,2,3,");
  EXPECT_EQ(PromptKey(json{{"model", "m"}, {"prompt", {"a", "b"}}}), "");  // a batch: no affinity
  EXPECT_EQ(PromptKey(json{{"model", "m"}}), "");
  EXPECT_EQ(PromptKey(json::array()), "");
  EXPECT_EQ(PromptKey(json{{"messages", {1}}}), "");
}

TEST(BlockChain, NamesFullBlocksByTheirWholePrefix) {
  const std::string a(1000, 'a');
  std::string b = a;
  b[10] = 'b';
  const auto ca = BlockChain(a, 256), cb = BlockChain(b, 256);
  ASSERT_EQ(ca.size(), 3u);  // 1000 / 256: the tail is not a full block
  ASSERT_EQ(cb.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(ca[i], cb[i]) << i;  // a change in block 0 renames every block
  EXPECT_EQ(ca[1] == ca[2], false);                              // equal text, different position
  EXPECT_EQ(BlockChain(a.substr(0, 600), 256), std::vector<uint64_t>(ca.begin(), ca.begin() + 2));
  EXPECT_TRUE(BlockChain("short", 256).empty());
  EXPECT_TRUE(BlockChain(a, 0).empty());
}

TEST(PrefixAffinity, AConversationStaysWhereItsCacheIs) {
  PrefixAffinity aff(3, {});
  const auto turn1 = BlockChain(PromptKey(Chat(1, "rivers")), 256);
  const auto turn2 = BlockChain(PromptKey(Chat(2, "rivers")), 256);
  const auto other = BlockChain(PromptKey(Chat(2, "mountains")), 256);
  ASSERT_GE(turn1.size(), 2u);
  // Turn 1 went to instance 2 (say it was the least loaded then).
  aff.Record(2, turn1);
  EXPECT_EQ(aff.Match(2, turn2), turn1.size());
  EXPECT_EQ(aff.Match(0, turn2), 0u);
  // Turn 2: instance 2 is busier than 0 but within the slack: the match wins.
  auto c = aff.Choose({{0, 0}, {1, 1}, {2, 3}}, turn2);
  EXPECT_TRUE(c.by_prefix);
  EXPECT_EQ(c.instance, 2u);
  EXPECT_EQ(c.matched_blocks, turn1.size());
  // Beyond the slack (4): the least loaded, whatever it holds.
  c = aff.Choose({{0, 0}, {1, 1}, {2, 5}}, turn2);
  EXPECT_FALSE(c.by_prefix);
  EXPECT_EQ(c.instance, 0u);
  // Another conversation matches nothing: the least loaded, the earlier listed on a tie.
  c = aff.Choose({{0, 2}, {1, 1}, {2, 1}}, other);
  EXPECT_FALSE(c.by_prefix);
  EXPECT_EQ(c.instance, 1u);
  // The longer match wins between two holders; equal matches: the less loaded.
  aff.Record(0, turn2);
  c = aff.Choose({{0, 2}, {1, 0}, {2, 0}}, turn2);
  EXPECT_EQ(c.instance, 0u);
  aff.Record(1, turn2);
  c = aff.Choose({{0, 2}, {1, 1}, {2, 0}}, turn2);
  EXPECT_EQ(c.instance, 1u);
  // A forgotten instance (it went away) matches nothing.
  aff.Forget(1);
  EXPECT_EQ(aff.Match(1, turn2), 0u);
  EXPECT_EQ(aff.Blocks(1), 0u);
}

TEST(PrefixAffinity, MinimumMatchAndASingleCandidate) {
  PrefixAffinityOptions o;
  o.min_match_blocks = 3;
  PrefixAffinity aff(2, o);
  const std::string key(2000, 'q');
  const auto chain = BlockChain(key, 256);
  aff.Record(1, std::vector<uint64_t>(chain.begin(), chain.begin() + 2));
  auto c = aff.Choose({{0, 0}, {1, 0}}, chain);
  EXPECT_FALSE(c.by_prefix) << "2 blocks are under the minimum of 3";
  EXPECT_EQ(c.instance, 0u);
  aff.Record(1, std::vector<uint64_t>(chain.begin(), chain.begin() + 3));
  c = aff.Choose({{0, 0}, {1, 0}}, chain);
  EXPECT_TRUE(c.by_prefix);
  EXPECT_EQ(c.instance, 1u);
  c = aff.Choose({{1, 7}}, chain);
  EXPECT_EQ(c.instance, 1u);
}

TEST(PrefixAffinity, MemoryIsBoundedAndPrefixesOutliveTheirExtensions) {
  PrefixAffinityOptions o;
  o.max_blocks_per_instance = 8;
  PrefixAffinity aff(1, o);
  const std::string base(256 * 6, 'z');
  const auto long_chain = BlockChain(base, 256);  // 6 blocks
  aff.Record(0, long_chain);
  for (int i = 0; i < 3; ++i) {  // other prompts push 6 more blocks through an 8-block table
    std::string other(256 * 2, static_cast<char>('a' + i));
    aff.Record(0, BlockChain(other, 256));
  }
  EXPECT_EQ(aff.Blocks(0), 8u);
  // The long prompt's last blocks were dropped first: what is left is still a leading run.
  const size_t m = aff.Match(0, long_chain);
  EXPECT_GT(m, 0u);
  EXPECT_LT(m, long_chain.size());
  // Re-recording refreshes without duplicating.
  aff.Record(0, long_chain);
  EXPECT_EQ(aff.Blocks(0), 8u);
  EXPECT_EQ(aff.Match(0, long_chain), 6u);
}

}  // namespace
}  // namespace gyre::cli
