// Golden tests: every (template, case) in testdata/chat_templates/expected.json, rendered by
// @huggingface/jinja with tools/jinja_ref/render.mjs, must render byte for byte the same here
// (or, for raise_exception, fail with the same message). See testdata/chat_templates/README.md.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "serve/chat_template.h"

namespace gyre {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDir = GYRE_SOURCE_DIR "/src/serve/testdata/chat_templates/";

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The clock render.mjs pins strftime_now() to: Thursday 2026-01-15 10:30:00.
ChatTemplate::RenderOptions PinnedOptions() {
  std::tm now{};
  now.tm_year = 2026 - 1900;
  now.tm_mon = 0;
  now.tm_mday = 15;
  now.tm_hour = 10;
  now.tm_min = 30;
  now.tm_wday = 4;
  now.tm_yday = 14;
  ChatTemplate::RenderOptions options;
  options.now = now;
  return options;
}

TEST(ChatTemplateGolden, MatchesHuggingFaceJinja) {
  const Json cases = Json::parse(ReadText(kDir + "cases.json"));
  const Json expected = Json::parse(ReadText(kDir + "expected.json"));
  const ChatTemplate::RenderOptions options = PinnedOptions();

  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() != ".jinja") continue;
    auto t = ChatTemplate::Compile(ReadText(entry.path().string()));
    ASSERT_TRUE(t.ok()) << entry.path() << ": " << t.error().ToString();
    templates[entry.path().stem().string()] = std::move(t).value();
  }
  ASSERT_GE(templates.size(), 20u);

  int num_outputs = 0, num_raised = 0;
  std::set<std::string> covered;
  for (const Json& r : expected.at("results")) {
    const std::string name = r.at("template").get<std::string>();
    const std::string case_name = r.at("case").get<std::string>();
    SCOPED_TRACE(name + " / " + case_name);
    ASSERT_TRUE(templates.count(name)) << "expected.json names a template that is not in " << kDir;
    covered.insert(name);

    const Json& vars = cases.at("template_vars");
    Json context = vars.contains(name) ? vars.at(name) : vars.at("default");
    for (const auto& [key, value] : cases.at("cases").at(case_name).items()) context[key] = value;

    auto out = templates[name]->Render(context, options);
    if (r.contains("raised")) {
      ++num_raised;
      ASSERT_FALSE(out.ok()) << "expected raise_exception(" << r.at("raised") << ")";
      EXPECT_EQ(out.error().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(out.error().message(), r.at("raised").get<std::string>());
      continue;
    }
    ++num_outputs;
    ASSERT_TRUE(out.ok()) << out.error().ToString();
    const std::string want = r.at("output").get<std::string>();
    if (*out != want) {
      size_t at = 0;
      while (at < want.size() && at < out->size() && want[at] == (*out)[at]) ++at;
      size_t from = at > 60 ? at - 60 : 0;
      ADD_FAILURE() << "first difference at byte " << at << "\n  want: " << Json(want.substr(from, 160)).dump()
                    << "\n  got:  " << Json(out->substr(from, 160)).dump();
    }
  }
  EXPECT_EQ(covered.size(), templates.size()) << "every template in the folder has goldens";
  EXPECT_GE(num_outputs + num_raised, 240);
  std::printf("[ golden   ] %zu templates, %d outputs and %d raise_exception cases\n", templates.size(), num_outputs,
              num_raised);
}

}  // namespace
}  // namespace gyre
