//===- InputLimits.h - Bounds on what an input file may cost ----*- C++ -*-===//
//
// Artifacts, model directories and tokenizers come from users and may be
// hostile. Whatever such a file controls (how deep its JSON nests, how many
// bytes are read, which other files it names) is bounded here, once, so that
// every reader answers a bad file with an error instead of a stack overflow,
// an endless read or a file outside the directory it belongs to.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SUPPORT_INPUTLIMITS_H
#define INFER_RUNTIME_SUPPORT_INPUTLIMITS_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include <sys/stat.h>

namespace infer {

/// The deepest nesting of JSON arrays and objects any input may have. Real
/// configs, tokenizers and plans nest fewer than 16 levels; recursive
/// readers (llvm::json, the tokenizer's Sequence components) overflow the
/// stack some ten thousand levels down.
inline constexpr int kMaxJsonDepth = 128;

/// The largest JSON or text file (config, tokenizer, plan, manifest) read
/// whole into memory: 1 GiB, several times the largest real tokenizer.json.
inline constexpr int64_t kMaxTextFileBytes = int64_t(1) << 30;

/// The byte offset at which `text` first nests JSON arrays and objects
/// deeper than `maxDepth`, or none. Only brackets outside strings count; the
/// text need not be valid JSON (the parser reports that).
inline std::optional<size_t> findJsonDepthExcess(std::string_view text,
                                                 int maxDepth = kMaxJsonDepth) {
  int depth = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

/// An error naming `what` when `text` nests deeper than kMaxJsonDepth.
inline Status checkJsonDepth(std::string_view text, const std::string &what) {
  if (std::optional<size_t> at = findJsonDepthExcess(text))
    return invalidArgument(what + " nests arrays and objects deeper than " +
                           std::to_string(kMaxJsonDepth) + " levels (at byte " +
                           std::to_string(*at) + ")");
  return Status::ok();
}

/// Reads a whole regular file of at most `maxBytes` bytes. Devices, pipes
/// and directories are errors (a path like /dev/zero never ends).
inline StatusOr<std::string>
readBoundedFile(const std::string &path, int64_t maxBytes = kMaxTextFileBytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return notFound("cannot open '" + path + "'");
  if (!S_ISREG(st.st_mode))
    return invalidArgument("'" + path + "' is not a regular file");
  if (st.st_size > maxBytes)
    return resourceExhausted(
        "'" + path + "' has " + std::to_string(st.st_size) +
        " bytes, more than the limit of " + std::to_string(maxBytes));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return notFound("cannot open '" + path + "'");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  in.read(text.data(), st.st_size);
  if (in.gcount() != st.st_size)
    return dataLoss("cannot read '" + path + "' (it changed while read)");
  return text;
}

/// An error unless `name` is a relative path to a file below the directory
/// it is relative to: no absolute path, no "..", not the directory itself.
/// The check is lexical: a model directory may hold links into a cache (the
/// Hugging Face hub's snapshots link to its blobs). `what` says who names
/// the file ("the manifest's plan_file"), `dir` what it is relative to.
inline Status checkRelativePath(const std::string &name,
                                const std::string &what,
                                const std::string &dir) {
  namespace fs = std::filesystem;
  const fs::path relative = fs::path(name).lexically_normal();
  bool escapes = name.empty() || relative.is_absolute() ||
                 relative.has_root_name() || relative == "." ||
                 relative.filename().empty();
  for (const fs::path &part : relative)
    escapes = escapes || part == "..";
  if (escapes)
    return invalidArgument(what + " '" + name + "' must name a file inside " +
                           dir + " (a relative path without '..')");
  return Status::ok();
}

/// `dir`/`name` once checkRelativePath accepts `name`.
inline StatusOr<std::string> resolveInside(const std::string &dir,
                                           const std::string &name,
                                           const std::string &what) {
  INFER_RETURN_IF_ERROR(checkRelativePath(name, what, dir));
  return (std::filesystem::path(dir) / name).string();
}

} // namespace infer

#endif // INFER_RUNTIME_SUPPORT_INPUTLIMITS_H
