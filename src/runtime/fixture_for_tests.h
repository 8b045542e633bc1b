// Test helper (header-only, tests only): a model fixture under tests/fixtures, loaded once per
// test binary (GYRE_SOURCE_DIR is the test targets' definition).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/model.h"

namespace gyre {

// tests/fixtures/<name>, e.g. "glm5_tiny". A load failure is a test failure (and a crash on use).
inline const Model& FixtureModel(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Model>> loaded;
  std::lock_guard<std::mutex> l(mu);
  std::unique_ptr<Model>& m = loaded[name];
  if (!m) {
    auto r = Model::Load(std::string(GYRE_SOURCE_DIR) + "/tests/fixtures/" + name);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) m = std::move(*r);
  }
  return *m;
}

}  // namespace gyre
