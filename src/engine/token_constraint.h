// TokenConstraint: what the engine asks of a request whose output is constrained (structured
// output, docs/serve.md "Structured output"; the implementation is src/structured/). Per sampled
// token the engine asks for the set of allowed next tokens as a bitmask, hands it to the runner
// with the step (SampleSpec::allowed), and advances the constraint with the token that comes back.
//
// Thread safety: one constraint belongs to one request and is used only on the engine thread.
#pragma once

#include <cstdint>
#include <span>

#include "core/status.h"

namespace gyre {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the allowed next tokens: bit (id % 32) of words[id / 32] is set iff token `id` may come
  // next (EOS ids only where the output so far is complete). REQUIRES: words.size() ==
  // ceil(vocab / 32). Returns whether any token is allowed.
  virtual bool FillMask(std::span<uint32_t> words) = 0;
  // Advances over a sampled token. InvalidArgument if the token was not allowed (the state is then
  // unchanged).
  virtual Status Accept(int32_t id) = 0;
  // The output so far is complete and nothing may follow it: the engine ends the request (stop).
  virtual bool Complete() const = 0;
};

}  // namespace gyre
