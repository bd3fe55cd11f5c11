//===- Safetensors.h - Reader for the safetensors format --------*- C++ -*-===//
//
// https://github.com/huggingface/safetensors: an 8-byte little-endian header
// length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets"}, ...,
// "__metadata__": {...}}), then the data section. The reader maps the file
// and checks everything a truncated or lying file could get wrong (header
// length past the end, offsets out of range or overlapping, a shape that does
// not match its byte count, an unknown dtype) before any tensor is handed out.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SAFETENSORS_SAFETENSORS_H
#define INFER_RUNTIME_SAFETENSORS_SAFETENSORS_H

#include "runtime/support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace infer::safetensors {

enum class DType {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2
};

/// The format's spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtypeName(DType dtype);
std::optional<DType> parseDType(std::string_view name);
int64_t dtypeSize(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  /// Byte range [begin, end) inside the data section.
  uint64_t begin = 0;
  uint64_t end = 0;

  int64_t numElements() const;
};

struct Header {
  /// Tensors in the order of their data offsets.
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  /// Size of the JSON header in bytes (the data section starts at 8 + this).
  uint64_t headerSize = 0;
  /// The raw JSON header bytes (for fingerprints).
  std::string headerJson;

  const TensorInfo *find(std::string_view name) const;
};

/// Reads and validates only the header (compile time: no weights are read).
StatusOr<Header> readHeader(const std::string &path);

/// A memory-mapped safetensors file.
class File {
public:
  static StatusOr<std::unique_ptr<File>> open(const std::string &path);
  ~File();
  File(const File &) = delete;
  File &operator=(const File &) = delete;

  const std::string &path() const { return path_; }
  const Header &header() const { return header_; }
  uint64_t fileSize() const { return size_; }
  /// The whole mapped file (header included).
  std::string_view bytes() const {
    return std::string_view(reinterpret_cast<const char *>(data_), size_);
  }

  /// The tensor's raw bytes, or NotFound naming the tensor and the file.
  StatusOr<std::string_view> tensorBytes(std::string_view name) const;
  /// The tensor converted to fp32 (from f32, f16 or bf16).
  StatusOr<std::vector<float>> readAsF32(std::string_view name) const;

private:
  File() = default;
  std::string path_;
  Header header_;
  const uint8_t *data_ = nullptr; ///< start of the mapping
  uint64_t size_ = 0;
};

/// The safetensors files of a Hugging Face model directory: model.safetensors,
/// or the shards listed in model.safetensors.index.json. Maps tensor name to
/// file name (relative to the directory).
StatusOr<std::map<std::string, std::string>>
listModelTensors(const std::string &modelDir);

/// A tensor for writeFile: little-endian bytes of `dtype` in `shape`.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string_view bytes;
};

/// Writes a safetensors file (tensors laid out in the given order, header
/// padded with spaces to a multiple of 8 bytes like the reference writer).
Status writeFile(const std::string &path,
                 const std::vector<TensorToWrite> &tensors,
                 const std::map<std::string, std::string> &metadata = {});

/// Little-endian raw half-precision conversions.
float bf16ToF32(uint16_t bits);
float f16ToF32(uint16_t bits);

} // namespace infer::safetensors

#endif // INFER_RUNTIME_SAFETENSORS_SAFETENSORS_H
