// libFuzzer target: the structured-output compilers. The first byte picks the input kind (even:
// a regex, odd: a JSON schema as JSON text); the rest is the pattern or the schema.
//
// Whatever the bytes, compiling must neither crash, hang, throw nor overflow (UBSan), and a
// refusal is InvalidArgument. An accepted automaton keeps its contract (trap on violation): the
// start state is live, every live state without an exit accepts, and a walk along live bytes
// stays in range.
//
// Run: scripts/fuzz.sh (seeds: src/structured/testdata/fuzz_grammar/).
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "structured/json_schema.h"
#include "structured/regex.h"

using namespace gyre;
using namespace gyre::structured;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 4096) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string re = text;
  if (data[0] & 1) {
    const nlohmann::json schema = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return 0;
    auto r = JsonSchemaRegex(schema);
    if (!r.ok()) {
      if (r.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
      return 0;
    }
    re = *r;
  }
  auto dfa = CompileRegex(re, 2000);
  if (!dfa.ok()) {
    if (dfa.status().code() != StatusCode::kInvalidArgument) __builtin_trap();
    return 0;
  }
  if (dfa->num_states() < 1) __builtin_trap();
  // A deterministic walk: the lowest live byte each time, at most 64 steps.
  int32_t st = dfa->start();
  for (int step = 0; step < 64; ++step) {
    if (st < 0 || st >= dfa->num_states()) __builtin_trap();
    if (!dfa->HasExit(st)) {
      if (!dfa->Accepting(st)) __builtin_trap();
      break;
    }
    int next = ByteDfa::kDead;
    for (int b = 0; b < 256 && next == ByteDfa::kDead; ++b) next = dfa->Next(st, static_cast<uint8_t>(b));
    st = next;
  }
  return 0;
}
