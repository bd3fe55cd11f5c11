//===- SafetensorsTest.cpp - Reader vs valid, corrupt and real files ------===//

#include "runtime/safetensors/Safetensors.h"
#include "runtime/plan/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace infer::safetensors {
namespace {

namespace fs = std::filesystem;

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "/safetensors_" + name;
}

/// Writes an 8-byte length `declaredLength` (the header's size unless
/// given), the header text and `data`.
std::string writeRaw(const std::string &name, const std::string &header,
                     const std::string &data,
                     std::optional<uint64_t> declaredLength = std::nullopt) {
  std::string path = tempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = declaredLength.value_or(header.size());
  for (int i = 0; i < 8; ++i)
    out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
  return path;
}

void expectRejected(const std::string &path, const std::string &needle) {
  StatusOr<Header> header = readHeader(path);
  ASSERT_FALSE(header.isOk()) << path;
  EXPECT_NE(header.status().message().find(needle), std::string::npos)
      << header.status().message();
  EXPECT_NE(header.status().message().find(path), std::string::npos)
      << "the message must name the file: " << header.status().message();
  StatusOr<std::unique_ptr<File>> file = File::open(path);
  ASSERT_FALSE(file.isOk());
  EXPECT_NE(file.status().message().find(needle), std::string::npos)
      << file.status().message();
}

TEST(SafetensorsWriter, RoundTripsThroughTheReader) {
  std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-20f, 7.0f};
  std::vector<uint16_t> b = {0x3f80, 0xc000, 0x7f80}; // bf16 1, -2, inf
  std::vector<uint16_t> c = {0x3c00, 0x0001, 0xfbff}; // f16 1, 2^-24, -65504
  std::string path = tempPath("roundtrip.safetensors");
  Status written = writeFile(
      path,
      {{"a",
        DType::kF32,
        {2, 3},
        std::string_view(reinterpret_cast<const char *>(a.data()), 24)},
       {"b",
        DType::kBF16,
        {3},
        std::string_view(reinterpret_cast<const char *>(b.data()), 6)},
       {"c",
        DType::kF16,
        {3},
        std::string_view(reinterpret_cast<const char *>(c.data()), 6)}},
      {{"format", "pt"}});
  ASSERT_TRUE(written.isOk()) << written.message();
  StatusOr<std::unique_ptr<File>> file = File::open(path);
  ASSERT_TRUE(file.isOk()) << file.status().message();
  const Header &h = (*file)->header();
  EXPECT_EQ(h.headerSize % 8, 0u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(*(*file)->readAsF32("a"), a);
  EXPECT_EQ(*(*file)->readAsF32("b"),
            (std::vector<float>{1.0f, -2.0f, INFINITY}));
  EXPECT_EQ(*(*file)->readAsF32("c"),
            (std::vector<float>{1.0f, std::ldexp(1.0f, -24), -65504.0f}));
  StatusOr<std::string_view> missing = (*file)->tensorBytes("zzz");
  ASSERT_FALSE(missing.isOk());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST(SafetensorsWriter, RejectsBytesThatDoNotMatchTheShape) {
  float x[2] = {1, 2};
  Status s =
      writeFile(tempPath("bad_writer.safetensors"),
                {{"x",
                  DType::kF32,
                  {3},
                  std::string_view(reinterpret_cast<const char *>(x), 8)}});
  EXPECT_FALSE(s.isOk());
}

TEST(SafetensorsReader, AcceptsAValidHandWrittenFile) {
  std::string path =
      writeRaw("valid.safetensors",
               R"({"x":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
               R"("__metadata__":{"k":"v"}})",
               std::string(8, '\0'));
  StatusOr<Header> h = readHeader(path);
  ASSERT_TRUE(h.isOk()) << h.status().message();
  EXPECT_EQ(h->tensors[0].dtype, DType::kI32);
  StatusOr<std::unique_ptr<File>> f = File::open(path);
  ASSERT_TRUE(f.isOk());
  EXPECT_FALSE((*f)->readAsF32("x").isOk()) << "I32 is not a float type";
}

TEST(SafetensorsReader, RejectsFileShorterThanTheLength) {
  std::string path = tempPath("short.safetensors");
  std::ofstream(path, std::ios::binary) << "abc";
  expectRejected(path, "shorter than the 8-byte");
}

TEST(SafetensorsReader, RejectsHeaderLengthPastTheEnd) {
  expectRejected(writeRaw("past_end.safetensors", "{}", "", 4096),
                 "past the end of the file");
}

TEST(SafetensorsReader, RejectsHugeHeaderLength) {
  expectRejected(writeRaw("huge.safetensors", "{}", "", 1ull << 40), "100 MB");
}

TEST(SafetensorsReader, RejectsTruncatedData) {
  expectRejected(
      writeRaw("truncated.safetensors",
               R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
               std::string(10, '\0')),
      "past the end of the data section");
}

TEST(SafetensorsReader, RejectsOverlappingTensors) {
  expectRejected(
      writeRaw("overlap.safetensors",
               R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
               R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
               std::string(12, '\0')),
      "overlap");
}

TEST(SafetensorsReader, RejectsUnknownDType) {
  expectRejected(
      writeRaw("dtype.safetensors",
               R"({"x":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})",
               std::string(1, '\0')),
      "unknown dtype 'F4'");
}

TEST(SafetensorsReader, RejectsShapeSizeMismatch) {
  expectRejected(
      writeRaw("shape.safetensors",
               R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
               std::string(8, '\0')),
      "need 12 bytes");
}

TEST(SafetensorsReader, RejectsOverflowingShape) {
  expectRejected(
      writeRaw("overflow.safetensors",
               R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],)"
               R"("data_offsets":[0,8]}})",
               std::string(8, '\0')),
      "overflows");
}

TEST(SafetensorsReader, RejectsBadJson) {
  expectRejected(writeRaw("json.safetensors", R"({"x": {"dtype": )", ""),
                 "not valid JSON");
  expectRejected(writeRaw("array.safetensors", "[1,2]", ""),
                 "not a JSON object");
}

TEST(SafetensorsReader, RejectsMalformedEntries) {
  expectRejected(
      writeRaw("offsets.safetensors",
               R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
               std::string(4, '\0')),
      "begin > end");
  expectRejected(writeRaw("noshape.safetensors",
                          R"({"x":{"dtype":"F32","data_offsets":[0,4]}})",
                          std::string(4, '\0')),
                 "missing shape");
  expectRejected(
      writeRaw("negative.safetensors",
               R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
               std::string(4, '\0')),
      "size >= 0");
}

TEST(HalfConversions, CoverSpecialValues) {
  EXPECT_EQ(bf16ToF32(0x3f80), 1.0f);
  EXPECT_EQ(bf16ToF32(0x8000), -0.0f);
  EXPECT_TRUE(std::isnan(bf16ToF32(0x7fc0)));
  EXPECT_EQ(f16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(f16ToF32(0xc000), -2.0f);
  EXPECT_EQ(f16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToF32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16ToF32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16ToF32(0x7c00), INFINITY);
  EXPECT_TRUE(std::isnan(f16ToF32(0x7e00)));
}

TEST(SafetensorsFixtures, ReadsTheTrainedBf16Model) {
  const std::string dir =
      std::string(INFER_FIXTURES_DIR) + "/models/tiny-pycode-target";
  if (!fs::exists(dir + "/model.safetensors"))
    GTEST_SKIP() << "fixture missing: " << dir;
  StatusOr<std::unique_ptr<File>> file = File::open(dir + "/model.safetensors");
  ASSERT_TRUE(file.isOk()) << file.status().message();
  const TensorInfo *embed = (*file)->header().find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kBF16);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{4096, 384}));
  StatusOr<std::vector<float>> values =
      (*file)->readAsF32("model.embed_tokens.weight");
  ASSERT_TRUE(values.isOk());
  ASSERT_EQ(values->size(), 4096u * 384u);
  StatusOr<std::string_view> raw =
      (*file)->tensorBytes("model.embed_tokens.weight");
  uint16_t first;
  std::memcpy(&first, raw->data(), 2);
  EXPECT_EQ((*values)[0], bf16ToF32(first));
  // 8 layers x 9 tensors + embed + norm + lm_head.
  EXPECT_EQ((*file)->header().tensors.size(), 75u);

  StatusOr<std::map<std::string, std::string>> listed = listModelTensors(dir);
  ASSERT_TRUE(listed.isOk()) << listed.status().message();
  EXPECT_EQ(listed->size(), 75u);
  EXPECT_EQ(listed->at("lm_head.weight"), "model.safetensors");
}

TEST(SafetensorsFixtures, ReadsReferenceLogits) {
  const std::string path = std::string(INFER_FIXTURES_DIR) +
                           "/rand/llama-gqa/expected_logits.safetensors";
  if (!fs::exists(path))
    GTEST_SKIP() << "fixture missing: " << path;
  StatusOr<Header> header = readHeader(path);
  ASSERT_TRUE(header.isOk()) << header.status().message();
  const TensorInfo *logits = header->find("logits_2");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->shape, (std::vector<int64_t>{33, 512}));
}

TEST(ListModelTensors, ReadsAShardedIndex) {
  const std::string dir = ::testing::TempDir() + "/sharded_model";
  fs::create_directories(dir);
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  StatusOr<std::map<std::string, std::string>> listed = listModelTensors(dir);
  ASSERT_TRUE(listed.isOk()) << listed.status().message();
  EXPECT_EQ(listed->at("b"), "model-00002-of-00002.safetensors");

  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map": 3})";
  EXPECT_FALSE(listModelTensors(dir).isOk());
  StatusOr<std::map<std::string, std::string>> none =
      listModelTensors(::testing::TempDir() + "/no_such_model");
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
}

} // namespace
} // namespace infer::safetensors
