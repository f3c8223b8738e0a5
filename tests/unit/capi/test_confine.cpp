// Confining a config's model_path to a directory (ikv_model_load_with_config_confined, util/path_confine): what
// resolves inside loads; "..", absolute paths and symlinks that escape are refused, and every refusal reads the
// same whether or not the file exists, so a config cannot probe the file system.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "infokv/infokv.h"
#include "support/util.hpp"
#include "util/error.hpp"
#include "util/path_confine.hpp"

namespace fs = std::filesystem;

namespace {

struct Tree {
  fs::path base, root, outside;
  Tree() {
    base = fs::temp_directory_path() / ("infokv_confine_" + std::to_string(::getpid()));
    fs::remove_all(base);
    root = base / "models";
    outside = base / "secret";
    fs::create_directories(root / "sub");
    fs::create_directories(outside);
    fs::create_directories(root / "hf");
    fs::copy_file(infokv_test::stories_path(), root / "sub" / "model.gguf");
    fs::copy_file(infokv_test::stories_path(), outside / "other.gguf");
    fs::create_symlink(outside / "other.gguf", root / "link.gguf");
    fs::create_symlink("sub/model.gguf", root / "inner_link.gguf");
    std::ofstream(root / "hf" / "config.json") << "{}";
    fs::create_symlink(outside / "other.gguf", root / "hf" / "model.safetensors");
  }
  ~Tree() { fs::remove_all(base); }
};

// Status and message of loading `model_path` confined to `dir` through the C API (the model is freed).
int32_t load(const std::string &model_path, const char *dir, std::string *msg) {
  const std::string json = "{\"model_path\": \"" + model_path + "\"}";
  ikv_config *c = nullptr;
  EXPECT_EQ(ikv_config_from_json(&c, json.data(), json.size()), IKV_OK) << ikv_last_error_message();
  ikv_model *m = nullptr;
  const int32_t st = ikv_model_load_with_config_confined(&m, c, dir);
  *msg = ikv_last_error_message();
  if (st == IKV_OK) {
    EXPECT_NE(m, nullptr);
  }
  ikv_model_free(m);
  ikv_config_free(c);
  return st;
}

TEST(ConfinedModelPath, PathsInsideLoad) {
  REQUIRE_STORIES_BYTES();
  Tree t;
  std::string msg;
  const std::string dir = t.root.string();
  EXPECT_EQ(load("sub/model.gguf", dir.c_str(), &msg), IKV_OK) << msg;
  EXPECT_EQ(load("./sub/../sub/model.gguf", dir.c_str(), &msg), IKV_OK) << msg;
  EXPECT_EQ(load((t.root / "sub" / "model.gguf").string(), dir.c_str(), &msg), IKV_OK) << msg;
  EXPECT_EQ(load("inner_link.gguf", dir.c_str(), &msg), IKV_OK) << msg;  // a link that stays inside
  // The allowed directory may itself be given through "..".
  EXPECT_EQ(load("model.gguf", (t.root / "hf" / ".." / "sub").string().c_str(), &msg), IKV_OK) << msg;
}

TEST(ConfinedModelPath, EscapesAreRefusedAlikeWhetherOrNotTheFileExists) {
  REQUIRE_STORIES_BYTES();
  Tree t;
  const std::string dir = t.root.string();
  const std::string outside_abs = (t.outside / "other.gguf").string();
  const std::string missing_abs = (t.outside / "nothing.gguf").string();
  const std::pair<std::string, std::string> pairs[] = {
      {"../secret/other.gguf", "../secret/nothing.gguf"},  // ".." out: existing vs missing
      {outside_abs, missing_abs},                          // absolute
      {"link.gguf", "sub/nothing.gguf"},                   // an escaping link vs a missing file inside
      {"hf", "../secret"},                                 // a checkpoint with an escaping entry; a directory outside
  };
  for (const auto &p : pairs) {
    std::string m1, m2;
    EXPECT_EQ(load(p.first, dir.c_str(), &m1), IKV_ERR_IO) << p.first << ": " << m1;
    EXPECT_EQ(load(p.second, dir.c_str(), &m2), IKV_ERR_IO) << p.second << ": " << m2;
    // The same text but for the path the config gave.
    EXPECT_EQ(m1, "model_path '" + p.first + "' does not name a model inside the allowed directory");
    EXPECT_EQ(m2, "model_path '" + p.second + "' does not name a model inside the allowed directory");
  }
}

TEST(ConfinedModelPath, BadArgumentsAndTheUnconfinedLoad) {
  REQUIRE_STORIES_BYTES();
  Tree t;
  std::string msg;
  EXPECT_EQ(load("sub/model.gguf", nullptr, &msg), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(load("sub/model.gguf", (t.base / "no_such_dir").string().c_str(), &msg), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(load("sub/model.gguf", (t.root / "sub" / "model.gguf").string().c_str(), &msg), IKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(load("", t.root.string().c_str(), &msg), IKV_ERR_BAD_CONFIG);
  ikv_model *m = reinterpret_cast<ikv_model *>(0x1);
  EXPECT_EQ(ikv_model_load_with_config_confined(&m, nullptr, t.root.string().c_str()), IKV_ERR_BAD_HANDLE);
  EXPECT_EQ(m, nullptr);
  // The core function resolves to the canonical path.
  EXPECT_EQ(infokv::confine_path("inner_link.gguf", t.root.string()), fs::canonical(t.root / "sub" / "model.gguf").string());
}

}  // namespace
