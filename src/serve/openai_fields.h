// The request fields of the two generation endpoints and what gyre does with each; the reader the
// request parsers take fields through.
//
// One table lists every field gyre knows: OpenAI's chat/completions and completions fields,
// vLLM's extensions, and OpenAI's Responses fields (/v1/responses, rows of their own: a name
// there may mean something else than on the other two endpoints). Each is honoured (it changes the prompt, the engine's parameters or the
// response), accepted only at its default value, accepted as metadata that nothing reads, or
// refused. A body key that is not in the table for its endpoint is refused too: gyre never
// accepts a field and ignores it. docs/serve.md holds the same table for users;
// request_fields_test.cc proves each row.
//
// To add a field: add its row here (the parser's BodyFields::Get aborts on a name without one),
// then handle it in openai_protocol.cc (kHonoured) or let CheckTableFields do it (the others),
// then add its probe in request_fields_test.cc and its line in docs/serve.md.
//
// Thread safety: the table is immutable. A BodyFields is used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "serve/openai_protocol.h"

namespace gyre::serve {

enum class Endpoint : uint8_t { kChat = 1, kCompletions = 2, kResponses = 4 };
const char* EndpointPath(Endpoint e);  // "/v1/chat/completions", "/v1/completions" or "/v1/responses"

enum class FieldUse : uint8_t {
  kHonoured,     // changes the prompt, the engine's parameters or the response; some values may be refused
  kDefaultOnly,  // accepted at one of `values` (its neutral value); any other value is refused
  kUnused,       // accepted, of type `values`, and read by nothing: it cannot change the output (`note` says why)
  kRefused,      // any value but null is refused
};
const char* FieldUseName(FieldUse u);  // "honoured", "default only", "unused", "refused"

struct RequestField {
  std::string_view name;
  uint8_t endpoints;  // mask of Endpoint bits
  FieldUse use;
  // kDefaultOnly: the accepted values as a JSON array ("[1]", R"(["auto", "default"])").
  // kUnused: the JSON type the value must have ("string" or "object"). Empty otherwise.
  std::string_view values;
  // kDefaultOnly, kRefused: the error after the quoted field name ("'n' <note>").
  // kHonoured, kUnused: what gyre does with it. docs/serve.md says the same.
  std::string_view note;
};

// Every known field, in the order of docs/serve.md.
std::span<const RequestField> RequestFields();
// The row of `name` for endpoint `e`, or nullptr.
const RequestField* FindRequestField(std::string_view name, Endpoint e);

// The top-level fields of one request body. A JSON null counts as absent everywhere, as the
// official clients send null for "unset".
class BodyFields {
 public:
  // `body` must be an object and outlive this reader. InvalidArgument naming the first non-null
  // key that is not a field of `e` (saying so when it is a field of another endpoint).
  static Result<BodyFields> Open(const Json& body, Endpoint e);

  // The value of `name`, or nullptr when absent or null; marks it read.
  // REQUIRES (checked, aborts): `name` has a row for this endpoint.
  const Json* Get(std::string_view name);
  Endpoint endpoint() const { return endpoint_; }

  // Checks every kDefaultOnly, kUnused and kRefused field of the endpoint (InvalidArgument naming
  // the field, with its note). The parser handles the kHonoured ones itself.
  Status CheckTableFields();
  // Internal naming a non-null field that no Get read: a row the parser forgot, which would
  // otherwise be accepted and ignored. Call after parsing.
  Status CheckAllRead() const;

 private:
  BodyFields(const Json& body, Endpoint e) : body_(&body), endpoint_(e) {}

  const Json* body_;
  Endpoint endpoint_;
  std::vector<std::string_view> read_;  // names from the table (static storage)
};

// Readers of one field of `f` (defined in openai_protocol.cc, shared by the request parsers).
// Absent or null leaves *out unchanged; otherwise InvalidArgument naming `key` unless the value is
// a boolean / an integer in [lo, hi] (a float with an integral value counts) / a number in
// [lo, hi] ((lo, hi] when `lo_open`).
Status ReadBoolField(BodyFields& f, const char* key, bool* out);
Status ReadIntField(BodyFields& f, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out);
Status ReadFloatField(BodyFields& f, const char* key, double lo, double hi, bool lo_open, float* out);

}  // namespace gyre::serve
