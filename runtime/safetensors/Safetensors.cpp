//===- Safetensors.cpp - Reader and writer for the safetensors format -----===//
//
// Every check runs before a tensor is handed out, so a corrupt file is an
// error that names the file and the tensor, never an out-of-bounds read.
//
//===----------------------------------------------------------------------===//

#include "runtime/safetensors/Safetensors.h"
#include "runtime/support/InputLimits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace infer::safetensors {

using nlohmann::json;

/// The reference implementation refuses headers above 100 MB.
static constexpr uint64_t kMaxHeaderSize = 100ull << 20;

static const DType kAllDTypes[] = {
    DType::kF64, DType::kF32,  DType::kF16,    DType::kBF16,
    DType::kI64, DType::kI32,  DType::kI16,    DType::kI8,
    DType::kU8,  DType::kBool, DType::kF8E4M3, DType::kF8E5M2};

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kF64:
    return "F64";
  case DType::kF32:
    return "F32";
  case DType::kF16:
    return "F16";
  case DType::kBF16:
    return "BF16";
  case DType::kI64:
    return "I64";
  case DType::kI32:
    return "I32";
  case DType::kI16:
    return "I16";
  case DType::kI8:
    return "I8";
  case DType::kU8:
    return "U8";
  case DType::kBool:
    return "BOOL";
  case DType::kF8E4M3:
    return "F8_E4M3";
  case DType::kF8E5M2:
    return "F8_E5M2";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (DType d : kAllDTypes)
    if (dtypeName(d) == name)
      return d;
  return std::nullopt;
}

int64_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::kF64:
  case DType::kI64:
    return 8;
  case DType::kF32:
  case DType::kI32:
    return 4;
  case DType::kF16:
  case DType::kBF16:
  case DType::kI16:
    return 2;
  case DType::kI8:
  case DType::kU8:
  case DType::kBool:
  case DType::kF8E4M3:
  case DType::kF8E5M2:
    return 1;
  }
  return 0;
}

int64_t TensorInfo::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const TensorInfo *Header::find(std::string_view name) const {
  for (const TensorInfo &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

float bf16ToF32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

float f16ToF32(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  uint32_t u;
  if (exponent == 0x1f) {
    u = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    u = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    u = sign;
  } else {
    // Subnormal half: value = mantissa * 2^-24, exact in fp32.
    float f = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -f : f;
  }
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

//===----------------------------------------------------------------------===//
// Header parsing
//===----------------------------------------------------------------------===//

static uint64_t readLE64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

/// Multiplies with an overflow check (a lying shape must not wrap around).
static bool mulOverflows(uint64_t a, uint64_t b, uint64_t &out) {
  return __builtin_mul_overflow(a, b, &out);
}

static Status parseTensorEntry(const std::string &path, const std::string &name,
                               const json &entry, uint64_t dataSize,
                               TensorInfo &info) {
  auto fail = [&](const std::string &what) {
    return dataLoss(path + ": tensor '" + name + "': " + what);
  };
  if (!entry.is_object())
    return fail("entry is not an object");
  if (!entry.contains("dtype") || !entry["dtype"].is_string())
    return fail("missing dtype");
  std::string dtypeStr = entry["dtype"].get<std::string>();
  std::optional<DType> dtype = parseDType(dtypeStr);
  if (!dtype)
    return fail("unknown dtype '" + dtypeStr + "'");
  info.name = name;
  info.dtype = *dtype;
  if (!entry.contains("shape") || !entry["shape"].is_array())
    return fail("missing shape");
  uint64_t numElements = 1;
  for (const json &d : entry["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return fail("shape has a dimension that is not a size >= 0");
    info.shape.push_back(d.get<int64_t>());
    if (mulOverflows(numElements, d.get<uint64_t>(), numElements))
      return fail("shape overflows");
  }
  if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2 ||
      !entry["data_offsets"][0].is_number_unsigned() ||
      !entry["data_offsets"][1].is_number_unsigned())
    return fail("data_offsets must be [begin, end]");
  info.begin = entry["data_offsets"][0].get<uint64_t>();
  info.end = entry["data_offsets"][1].get<uint64_t>();
  if (info.begin > info.end)
    return fail("data_offsets begin > end");
  if (info.end > dataSize)
    return fail("data_offsets [" + std::to_string(info.begin) + ", " +
                std::to_string(info.end) +
                ") past the end of the data section (" +
                std::to_string(dataSize) + " bytes)");
  uint64_t bytes;
  if (mulOverflows(numElements, static_cast<uint64_t>(dtypeSize(*dtype)),
                   bytes))
    return fail("shape overflows");
  if (bytes != info.end - info.begin)
    return fail("shape and dtype need " + std::to_string(bytes) +
                " bytes but data_offsets span " +
                std::to_string(info.end - info.begin));
  return Status::ok();
}

/// Validates `headerJson`, the header of a file of `fileSize` bytes.
static StatusOr<Header> parseHeader(const std::string &path,
                                    std::string_view headerJson,
                                    uint64_t fileSize) {
  Header header;
  header.headerSize = headerJson.size();
  header.headerJson = std::string(headerJson);
  uint64_t dataSize = fileSize - 8 - header.headerSize;
  json j = json::parse(headerJson.begin(), headerJson.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded())
    return dataLoss(path + ": header is not valid JSON");
  if (!j.is_object())
    return dataLoss(path + ": header is not a JSON object");
  for (const auto &[key, value] : j.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        return dataLoss(path + ": __metadata__ is not an object");
      for (const auto &[mk, mv] : value.items()) {
        if (!mv.is_string())
          return dataLoss(path + ": __metadata__ value '" + mk +
                          "' is not a string");
        header.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    TensorInfo info;
    INFER_RETURN_IF_ERROR(parseTensorEntry(path, key, value, dataSize, info));
    header.tensors.push_back(std::move(info));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo &a, const TensorInfo &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    const TensorInfo &prev = header.tensors[i - 1];
    const TensorInfo &cur = header.tensors[i];
    if (cur.begin < prev.end)
      return dataLoss(path + ": tensors '" + prev.name + "' and '" + cur.name +
                      "' overlap in the data section");
  }
  return header;
}

static StatusOr<uint64_t> checkedHeaderSize(const std::string &path,
                                            const uint8_t *prefix,
                                            uint64_t fileSize) {
  uint64_t n = readLE64(prefix);
  if (n > kMaxHeaderSize)
    return dataLoss(path + ": header length " + std::to_string(n) +
                    " is larger than the 100 MB limit");
  if (n > fileSize - 8)
    return dataLoss(path + ": header length " + std::to_string(n) +
                    " runs past the end of the file (" +
                    std::to_string(fileSize) + " bytes)");
  return n;
}

StatusOr<Header> readHeader(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return notFound("cannot open '" + path + "'");
  in.seekg(0, std::ios::end);
  uint64_t fileSize = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (fileSize < 8)
    return dataLoss(path + ": file is shorter than the 8-byte header length");
  uint8_t prefix[8];
  in.read(reinterpret_cast<char *>(prefix), 8);
  INFER_ASSIGN_OR_RETURN(uint64_t n, checkedHeaderSize(path, prefix, fileSize));
  std::string headerJson(n, '\0');
  in.read(headerJson.data(), static_cast<std::streamsize>(n));
  if (!in)
    return dataLoss(path + ": failed to read the header");
  return parseHeader(path, headerJson, fileSize);
}

//===----------------------------------------------------------------------===//
// File
//===----------------------------------------------------------------------===//

StatusOr<std::unique_ptr<File>> File::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return notFound("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return dataLoss("cannot stat '" + path + "'");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return dataLoss(path + ": file is shorter than the 8-byte header length");
  }
  void *map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED)
    return dataLoss("cannot map '" + path + "': " + std::strerror(errno));
  std::unique_ptr<File> file(new File());
  file->path_ = path;
  file->data_ = static_cast<const uint8_t *>(map);
  file->size_ = size;
  INFER_ASSIGN_OR_RETURN(uint64_t n,
                         checkedHeaderSize(path, file->data_, size));
  std::string_view headerJson(reinterpret_cast<const char *>(file->data_ + 8),
                              n);
  INFER_ASSIGN_OR_RETURN(file->header_, parseHeader(path, headerJson, size));
  return file;
}

File::~File() {
  if (data_)
    ::munmap(const_cast<uint8_t *>(data_), size_);
}

StatusOr<std::string_view> File::tensorBytes(std::string_view name) const {
  const TensorInfo *info = header_.find(name);
  if (!info)
    return notFound("tensor '" + std::string(name) + "' not found in " + path_);
  const uint8_t *base = data_ + 8 + header_.headerSize;
  return std::string_view(reinterpret_cast<const char *>(base + info->begin),
                          info->end - info->begin);
}

StatusOr<std::vector<float>> File::readAsF32(std::string_view name) const {
  INFER_ASSIGN_OR_RETURN(std::string_view bytes, tensorBytes(name));
  const TensorInfo *info = header_.find(name);
  size_t n = static_cast<size_t>(info->numElements());
  std::vector<float> out(n);
  switch (info->dtype) {
  case DType::kF32:
    std::memcpy(out.data(), bytes.data(), n * sizeof(float));
    break;
  case DType::kF16:
  case DType::kBF16: {
    const bool isBF16 = info->dtype == DType::kBF16;
    for (size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      out[i] = isBF16 ? bf16ToF32(bits) : f16ToF32(bits);
    }
    break;
  }
  default:
    return unimplemented(path_ + ": tensor '" + std::string(name) +
                         "' has dtype " + std::string(dtypeName(info->dtype)) +
                         ", which cannot be read as fp32");
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Model directories
//===----------------------------------------------------------------------===//

static bool fileExists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

StatusOr<std::map<std::string, std::string>>
listModelTensors(const std::string &modelDir) {
  std::map<std::string, std::string> tensors;
  const std::string indexPath = modelDir + "/model.safetensors.index.json";
  if (fileExists(indexPath)) {
    INFER_ASSIGN_OR_RETURN(std::string text, readBoundedFile(indexPath));
    INFER_RETURN_IF_ERROR(checkJsonDepth(text, indexPath));
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return dataLoss(indexPath + ": not a valid JSON object");
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      return dataLoss(indexPath + ": missing the weight_map object");
    for (const auto &[name, file] : j["weight_map"].items()) {
      if (!file.is_string())
        return dataLoss(indexPath + ": weight_map entry '" + name +
                        "' is not a file name");
      // The compiler reads and records these files: never one outside.
      INFER_RETURN_IF_ERROR(checkRelativePath(
          file.get<std::string>(),
          indexPath + ": weight_map entry '" + name + "'", modelDir));
      tensors[name] = file.get<std::string>();
    }
    return tensors;
  }
  const std::string single = modelDir + "/model.safetensors";
  if (!fileExists(single))
    return notFound(modelDir + " has neither model.safetensors nor "
                               "model.safetensors.index.json");
  INFER_ASSIGN_OR_RETURN(Header header, readHeader(single));
  for (const TensorInfo &t : header.tensors)
    tensors[t.name] = "model.safetensors";
  return tensors;
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

Status writeFile(const std::string &path,
                 const std::vector<TensorToWrite> &tensors,
                 const std::map<std::string, std::string> &metadata) {
  json header = json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite &t : tensors) {
    int64_t numElements = 1;
    for (int64_t d : t.shape)
      numElements *= d;
    if (static_cast<uint64_t>(numElements * dtypeSize(t.dtype)) !=
        t.bytes.size())
      return invalidArgument("tensor '" + t.name +
                             "': " + std::to_string(t.bytes.size()) +
                             " bytes do not match its shape and dtype");
    if (header.contains(t.name))
      return invalidArgument("tensor '" + t.name + "' written twice");
    header[t.name] = json{{"dtype", std::string(dtypeName(t.dtype))},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return notFound("cannot open '" + path + "' for writing");
  uint64_t n = text.size();
  char prefix[8];
  for (int i = 0; i < 8; ++i)
    prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.write(prefix, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorToWrite &t : tensors)
    out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  out.close();
  if (!out)
    return dataLoss("failed to write '" + path + "'");
  return Status::ok();
}

} // namespace infer::safetensors
