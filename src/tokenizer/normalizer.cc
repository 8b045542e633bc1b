#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

namespace gyre::tok {
namespace {

constexpr int kMaxNesting = 16;  // Sequence inside Sequence; guards the recursion

bool IsAscii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

Result<std::string> ApplyNormalForm(std::string_view text, NormalForm form) {
  // NOTE: ASCII is invariant under every normal form; this skips utf8proc for plain English.
  if (IsAscii(text)) return std::string(text);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return Status::Internal(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  }
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

Result<Normalizer> Normalizer::FromJson(const Json& j, const std::string& path) {
  Normalizer n;
  if (!j.is_null()) GYRE_RETURN_IF_ERROR(n.Add(j, path, 0));
  return n;
}

Status Normalizer::Add(const Json& j, const std::string& path, int depth) {
  if (depth > kMaxNesting) return Status::InvalidArgument(path + ": nested too deeply");
  GYRE_ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "NFC") {
    forms_.push_back(NormalForm::kNfc);
  } else if (type == "NFD") {
    forms_.push_back(NormalForm::kNfd);
  } else if (type == "NFKC") {
    forms_.push_back(NormalForm::kNfkc);
  } else if (type == "NFKD") {
    forms_.push_back(NormalForm::kNfkd);
  } else if (type == "Sequence") {
    const std::string list_path = FieldPath(path, "normalizers");
    const Json* list = FindField(j, "normalizers");
    if (list == nullptr) return Status::InvalidArgument(list_path + ": missing");
    if (!list->is_array()) return TypeError(list_path, "array", *list);
    for (size_t i = 0; i < list->size(); ++i) {
      GYRE_RETURN_IF_ERROR(Add((*list)[i], IndexPath(list_path, i), depth + 1));
    }
  } else {
    return Status::InvalidArgument(FieldPath(path, "type") + ": unsupported normalizer \"" + type +
                                   "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
  }
  return Status::Ok();
}

Result<std::string> Normalizer::Normalize(std::string_view text) const {
  std::string s(text);
  for (NormalForm form : forms_) {
    GYRE_ASSIGN_OR_RETURN(s, ApplyNormalForm(s, form));
  }
  return s;
}

}  // namespace gyre::tok
