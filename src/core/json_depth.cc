#include "core/json_depth.h"

#include <string>

namespace gyre {

Status CheckJsonDepth(std::string_view text, std::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      if (ch == '\\') ++i;  // skip the escaped character
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > max_depth) {
        return Status::InvalidArgument(std::string(what) + ": JSON nests deeper than " + std::to_string(max_depth) +
                                       " levels (at byte " + std::to_string(i) + ")");
      }
    } else if (ch == ']' || ch == '}') {
      if (depth > 0) --depth;
    }
  }
  return Status::Ok();
}

}  // namespace gyre
