// A generation's provenance: which variables are recorded, how a record is
// bounded (docs/provenance.md).
#include "common/provenance.h"

#include <string>
#include <vector>

#include "agent/provenance.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Names(const std::vector<v1::EnvVar>& vars) {
  std::vector<std::string> out;
  for (const v1::EnvVar& v : vars) out.push_back(v.name() + "=" + v.value());
  return out;
}

TEST(SecretNameTest, TokenSecretKeyPasswordInAnyCase) {
  for (const char* name : {"MY_API_TOKEN", "aws_secret_access_key", "WANDB_API_KEY", "DbPassword",
                           "HF_token", "KEYRING"}) {
    EXPECT_TRUE(IsSecretName(name)) << name;
  }
  for (const char* name : {"NCCL_DEBUG", "TORCH_HOME", "PATH", "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_FALSE(IsSecretName(name)) << name;
  }
}

TEST(SelectEnvironmentTest, DefaultsAndPatternsSortedSecretsNeverEvenByName) {
  const std::vector<std::string> env = {
      "PATH=/usr/bin",        "NCCL_DEBUG=INFO",       "TORCH_HOME=/t",
      "OMP_NUM_THREADS=4",    "PYTHONPATH=/src",       "CUDA_VISIBLE_DEVICES=0,1",
      "NCCL_AUTH_TOKEN=s3cr3t", "MY_RUN=7",            "MY_API_TOKEN=s3cr3t",
      "TORCH_PASSWORD=x",     "HOME=/root",            "CUDA_HOME=/cuda"};
  EXPECT_THAT(Names(SelectEnvironment(env, {})),
              ElementsAre("CUDA_VISIBLE_DEVICES=0,1", "NCCL_DEBUG=INFO", "OMP_NUM_THREADS=4",
                          "PYTHONPATH=/src", "TORCH_HOME=/t"));
  // A pattern that would take a secret takes only the others.
  EXPECT_THAT(Names(SelectEnvironment(env, {"MY_*"})),
              ElementsAre("CUDA_VISIBLE_DEVICES=0,1", "MY_RUN=7", "NCCL_DEBUG=INFO",
                          "OMP_NUM_THREADS=4", "PYTHONPATH=/src", "TORCH_HOME=/t"));
  EXPECT_THAT(Names(SelectEnvironment(env, {"*"})), Not(testing::Contains(HasSubstr("s3cr3t"))));
}

TEST(SelectEnvironmentTest, TheLaunchOverrideWinsAndLongValuesAreCut) {
  const std::string long_value(10000, 'x');
  std::vector<v1::EnvVar> vars =
      SelectEnvironment({"NCCL_DEBUG=INFO", "NCCL_DEBUG=WARN", "TORCH_X=" + long_value}, {});
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0].value(), "WARN");
  EXPECT_EQ(vars[1].value().size(), 4096u);
}

TEST(FindScriptTest, FirstPythonFileAfterTheProgram) {
  EXPECT_EQ(FindScript({"torchrun", "--nnodes=2", "--redirects=2", "train.py", "--lr", "x.py"}),
            "train.py");
  EXPECT_EQ(FindScript({"/usr/bin/python3", "/src/train.py"}), "/src/train.py");
  EXPECT_EQ(FindScript({"python3", "-m", "trainer"}), "");
  EXPECT_EQ(FindScript({"run.py"}), "");  // the program itself is not the script
}

TEST(PorcelainFilesTest, PathsRenamesAndTheBound) {
  uint32_t total = 0;
  EXPECT_THAT(PorcelainFiles(" M train.py\n?? notes.txt\nR  old.py -> new.py\n", 64, &total),
              ElementsAre("train.py", "notes.txt", "new.py"));
  EXPECT_EQ(total, 3u);
  EXPECT_THAT(PorcelainFiles(" M a\n M b\n M c\n", 2, &total), ElementsAre("a", "b"));
  EXPECT_EQ(total, 3u);
  EXPECT_TRUE(PorcelainFiles("", 64, &total).empty());
  EXPECT_EQ(total, 0u);
}

TEST(BoundProvenanceTest, CutsListsFirstAndSaysSo) {
  v1::GenerationProvenance r;
  r.set_generation(3);
  r.add_command("torchrun");
  r.add_command("train.py");
  r.mutable_code()->set_commit("abc");
  EXPECT_TRUE(BoundProvenance(&r, 1024));
  EXPECT_FALSE(r.truncated());

  for (int i = 0; i < 1000; ++i) r.mutable_code()->add_modified(std::string(200, 'f'));
  for (int i = 0; i < 10; ++i) {
    v1::EnvVar* v = r.add_env();
    v->set_name("NCCL_" + std::to_string(i));
    v->set_value("1");
  }
  EXPECT_TRUE(BoundProvenance(&r, 64 * 1024));
  EXPECT_TRUE(r.truncated());
  EXPECT_LE(r.ByteSizeLong(), 64u * 1024);
  EXPECT_GT(r.code().modified_size(), 0);
  EXPECT_EQ(r.env_size(), 10);  // the files went first
  EXPECT_EQ(r.command_size(), 2);
}

TEST(DropSecretsTest, DropsWhatTheAgentShouldNotHaveSent) {
  v1::GenerationProvenance r;
  r.add_env()->set_name("NCCL_DEBUG");
  r.add_env()->set_name("MY_API_TOKEN");
  EXPECT_EQ(DropSecrets(&r), 1);
  ASSERT_EQ(r.env_size(), 1);
  EXPECT_EQ(r.env(0).name(), "NCCL_DEBUG");
}

}  // namespace
}  // namespace trainsup
