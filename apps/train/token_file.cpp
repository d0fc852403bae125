#include "apps/train/token_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/train/tokenizer.h"
#include "engine/core/check.h"

namespace fanout::train {

namespace {
constexpr int kHeaderInts = 256;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void load_bin(TokenData& data, std::ifstream& in, uint64_t file_size) {
  const std::string& path = data.path;
  FANOUT_CHECK(file_size >= kHeaderInts * 4, path, ": too short for an llm.c token file (",
               file_size, " bytes, the header alone is 1024)");
  std::vector<int32_t> header(kHeaderInts);
  in.read(reinterpret_cast<char*>(header.data()), kHeaderInts * 4);
  FANOUT_CHECK(in.good(), path, ": cannot read the header");
  int32_t magic = header[0], version = header[1];
  int64_t width = 0;
  if (magic == kBinMagicU16) {
    FANOUT_CHECK(version == 1, path, ": magic 20240520 needs version 1, found ", version);
    width = 2;
  } else if (magic == kBinMagicU32) {
    FANOUT_CHECK(version == 7, path, ": magic 20240801 needs version 7, found ", version);
    width = 4;
  } else {
    detail::throw_error(detail::str_cat(path, ": bad magic ", magic,
                                        " (an llm.c token file starts with 20240520 or 20240801)"));
  }
  int64_t count = static_cast<uint32_t>(header[2]);
  uint64_t expected = kHeaderInts * 4 + static_cast<uint64_t>(count) * width;
  FANOUT_CHECK(file_size == expected, path, ": the header says ", count, " tokens (", expected,
               " bytes) but the file has ", file_size, " bytes");
  FANOUT_CHECK(count > 0, path, ": holds no tokens");
  data.tokens.resize(count);
  if (width == 2) {
    std::vector<uint16_t> raw(count);
    in.read(reinterpret_cast<char*>(raw.data()), count * 2);
    for (int64_t i = 0; i < count; ++i) data.tokens[i] = raw[i];
  } else {
    std::vector<uint32_t> raw(count);
    in.read(reinterpret_cast<char*>(raw.data()), count * 4);
    for (int64_t i = 0; i < count; ++i) {
      FANOUT_CHECK(raw[i] < (1u << 31), path, ": token id ", raw[i], " at position ", i,
                   " is out of range");
      data.tokens[i] = static_cast<int32_t>(raw[i]);
    }
  }
  FANOUT_CHECK(in.good(), path, ": cannot read the tokens");
  data.from_bin = true;
}

void load_text(TokenData& data, std::ifstream& in) {
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  for (const std::string& doc : split_documents(text)) data.documents.push_back(byte_encode(doc));
  FANOUT_CHECK(!data.documents.empty(), data.path, ": holds no text (only blank lines)");
  for (const auto& doc : data.documents) {
    data.tokens.push_back(kBot);
    data.tokens.insert(data.tokens.end(), doc.begin(), doc.end());
    data.tokens.push_back(kEot);
  }
}
}  // namespace

TokenData token_file_load(const std::string& path) {
  std::error_code ec;
  FANOUT_CHECK(std::filesystem::exists(path, ec), path, ": no such file");
  FANOUT_CHECK(std::filesystem::is_regular_file(path, ec), path, ": not a regular file");
  uint64_t size = std::filesystem::file_size(path, ec);
  FANOUT_CHECK(!ec, path, ": cannot read its size");
  FANOUT_CHECK(size > 0, path, ": the file is empty");
  std::ifstream in(path, std::ios::binary);
  FANOUT_CHECK(in.good(), path, ": cannot open");
  TokenData data;
  data.path = path;
  if (ends_with(path, ".bin")) {
    load_bin(data, in, size);
  } else {
    load_text(data, in);
  }
  return data;
}

void token_data_check_vocab(const TokenData& data, int64_t vocab_size) {
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    int32_t t = data.tokens[i];
    FANOUT_CHECK(t >= 0 && t < vocab_size, data.path, ": token id ", t, " at position ", i,
                 " is out of range for vocabulary size ", vocab_size);
  }
}

void token_file_write_bin(const std::string& path, const std::vector<int32_t>& tokens) {
  FANOUT_CHECK(tokens.size() <= 0x7fffffffu, path, ": too many tokens for one llm.c file");
  bool narrow = true;
  for (int32_t t : tokens) {
    FANOUT_CHECK(t >= 0, path, ": cannot store the negative token id ", t);
    narrow &= t < 65536;
  }
  std::vector<int32_t> header(kHeaderInts, 0);
  header[0] = narrow ? kBinMagicU16 : kBinMagicU32;
  header[1] = narrow ? 1 : 7;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  FANOUT_CHECK(out.good(), path, ": cannot write");
  out.write(reinterpret_cast<const char*>(header.data()), kHeaderInts * 4);
  if (narrow) {
    std::vector<uint16_t> raw(tokens.begin(), tokens.end());
    out.write(reinterpret_cast<const char*>(raw.data()), raw.size() * 2);
  } else {
    out.write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
  }
  FANOUT_CHECK(out.good(), path, ": cannot write");
}

}  // namespace fanout::train
