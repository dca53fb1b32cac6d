// A generation's provenance: which variables are recorded, how a record is
// bounded, what differs between two generations (docs/provenance.md).
#include "common/provenance.h"

#include <string>
#include <vector>

#include "agent/provenance.h"
#include "cli/provenance_render.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainsup {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Change = v1::ProvenanceDiff::Change;

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

v1::RankHeartbeat HelperRecord(uint64_t generation, const std::string& path,
                               const std::string& hash) {
  v1::RankHeartbeat hb;
  hb.set_kind(v1::HEARTBEAT_KIND_PROVENANCE);
  hb.set_generation(generation);
  hb.mutable_provenance()->set_python("3.11.2");
  hb.mutable_provenance()->set_resumed_step(40);
  hb.mutable_provenance()->set_resumed_path(path);
  hb.mutable_provenance()->set_resumed_hash(hash);
  return hb;
}

TEST(MergeRankProvenanceTest, TheFirstRecordWholeThenOnlyTheHashOfTheSameCheckpointOnce) {
  v1::GenerationProvenance r;
  r.set_generation(3);
  EXPECT_FALSE(MergeRankProvenance(HelperRecord(2, "/ckpt/40", ""), &r));  // not this launch's
  EXPECT_FALSE(r.has_runtime());
  ASSERT_TRUE(MergeRankProvenance(HelperRecord(3, "/ckpt/40", ""), &r));
  EXPECT_EQ(r.runtime().python(), "3.11.2");
  EXPECT_EQ(r.runtime().resumed_hash(), "");
  v1::RankHeartbeat other = HelperRecord(3, "/ckpt/40", "");
  other.mutable_provenance()->set_python("3.12.0");
  EXPECT_FALSE(MergeRankProvenance(other, &r));  // the first one stays
  EXPECT_FALSE(MergeRankProvenance(HelperRecord(3, "/ckpt/30", "sha256:30"), &r));
  v1::RankHeartbeat update = HelperRecord(3, "/ckpt/40", "sha256:40");
  update.mutable_provenance()->set_python("3.12.0");
  ASSERT_TRUE(MergeRankProvenance(update, &r));
  EXPECT_EQ(r.runtime().resumed_hash(), "sha256:40");
  EXPECT_EQ(r.runtime().python(), "3.11.2");  // only the hash is taken
  EXPECT_FALSE(MergeRankProvenance(HelperRecord(3, "/ckpt/40", "sha256:other"), &r));
  EXPECT_EQ(r.runtime().resumed_hash(), "sha256:40");
}

v1::GenerationProvenance Record(const std::string& node, const std::string& nccl_debug) {
  v1::GenerationProvenance r;
  r.set_node(node);
  r.add_command("torchrun");
  r.add_command("train.py");
  r.set_working_directory("/src");
  r.mutable_code()->set_commit("c1");
  v1::EnvVar* v = r.add_env();
  v->set_name("NCCL_DEBUG");
  v->set_value(nccl_debug);
  r.set_kernel("Linux 6.1");
  r.mutable_runtime()->set_python("3.11.2");
  r.mutable_runtime()->set_torch("1.13.1");
  r.mutable_runtime()->set_world_size(4);
  r.mutable_runtime()->set_resumed_step(0);
  return r;
}

TEST(DiffProvenanceTest, IdenticalGenerationsDifferInNothingButWhatTheyResumed) {
  std::vector<v1::GenerationProvenance> a = {Record("n1", "INFO"), Record("n2", "INFO")};
  std::vector<v1::GenerationProvenance> b = a;
  b[0].mutable_runtime()->set_resumed_step(40);
  b[0].set_launched_unix_seconds(99);
  EXPECT_TRUE(DiffProvenance(a, b).empty());
}

TEST(DiffProvenanceTest, CodeEnvVersionsWorldSizeAndNodes) {
  std::vector<v1::GenerationProvenance> a = {Record("n1", "INFO"), Record("n2", "INFO")};
  std::vector<v1::GenerationProvenance> b = {Record("n1", "WARN"), Record("n3", "WARN")};
  for (v1::GenerationProvenance& r : b) {
    r.mutable_code()->set_dirty(true);
    r.mutable_code()->add_modified("train.py");
    r.mutable_runtime()->set_torch("2.1.0");
    r.mutable_runtime()->set_world_size(8);
    v1::EnvVar* v = r.add_env();
    v->set_name("OMP_NUM_THREADS");
    v->set_value("8");
  }
  a[0].add_env()->set_name("TORCH_OLD");
  const std::vector<Change> changes = DiffProvenance(a, b);
  std::vector<std::string> lines;
  for (const Change& c : changes) {
    lines.push_back(c.field() + "|" + c.name() + "|" + std::to_string(c.kind()) + "|" +
                    c.a() + "|" + c.b());
  }
  EXPECT_THAT(lines, ElementsAre("code.dirty||1|false|true", "code.modified|train.py|2||modified",
                                 "env|NCCL_DEBUG|1|INFO|WARN", "env|OMP_NUM_THREADS|2||8",
                                 "env|TORCH_OLD|3| (n1); <unset> (n2)|", "torch||1|1.13.1|2.1.0",
                                 "world_size||1|4|8", "nodes|n2|3|launched|",
                                 "nodes|n3|2||launched"));
}

TEST(DiffProvenanceTest, NodesThatDisagreeAreNamed) {
  std::vector<v1::GenerationProvenance> a = {Record("n1", "INFO"), Record("n2", "INFO")};
  std::vector<v1::GenerationProvenance> b = {Record("n1", "INFO"), Record("n2", "WARN")};
  const std::vector<Change> changes = DiffProvenance(a, b);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].a(), "INFO");
  EXPECT_EQ(changes[0].b(), "INFO (n1); WARN (n2)");
}

TEST(RenderProvenanceDiffTest, OneLinePerChangeOrNothing) {
  v1::ProvenanceResponse a;
  a.set_job_id("j");
  a.set_generation(1);
  *a.add_nodes() = Record("n1", "INFO");
  v1::ProvenanceResponse b = a;
  b.set_generation(2);
  EXPECT_THAT(RenderProvenanceDiff(MakeProvenanceDiff(a, b)),
              HasSubstr("j generation 1 -> j generation 2: no difference"));
  b.mutable_nodes(0)->mutable_env(0)->set_value("WARN");
  EXPECT_EQ(RenderProvenanceDiff(MakeProvenanceDiff(a, b)),
            "j generation 1 -> j generation 2: 1 change\n"
            "env NCCL_DEBUG            INFO -> WARN\n");
}

v1::FirstStep First(int64_t step, double lr, uint64_t samples) {
  v1::FirstStep s;
  s.set_step(step);
  s.set_learning_rate(lr);
  s.set_samples(samples);
  s.set_ranks(4);
  return s;
}

TEST(DiffFirstStepTest, LearningRateSamplesAndTokensButNotTheStep) {
  const v1::FirstStep a = First(0, 3e-4, 256);
  EXPECT_TRUE(DiffFirstStep(&a, &a).empty());
  const v1::FirstStep elsewhere = First(4001, 3e-4, 256);
  EXPECT_TRUE(DiffFirstStep(&a, &elsewhere).empty());  // every restart resumes elsewhere
  v1::FirstStep b = First(4001, 3e-3, 128);
  b.set_tokens(65536);
  std::vector<std::string> got;
  for (const Change& c : DiffFirstStep(&a, &b)) got.push_back(c.field() + "|" + c.a() + "|" + c.b());
  EXPECT_THAT(got, ElementsAre("first_step.learning_rate|0.0003|0.003", "first_step.samples|256|128",
                               "first_step.tokens|0|65536"));
  v1::FirstStep no_rate = a;
  no_rate.clear_learning_rate();
  got.clear();
  for (const Change& c : DiffFirstStep(&a, nullptr)) got.push_back(c.field() + "|" + c.b());
  EXPECT_THAT(got, ElementsAre("first_step.learning_rate|", "first_step.samples|",
                               "first_step.tokens|"));
  ASSERT_EQ(DiffFirstStep(&no_rate, &a).size(), 1u);
  EXPECT_TRUE(DiffFirstStep(nullptr, nullptr).empty());
}

TEST(RenderProvenanceTest, TheFirstStepOrThatThereIsNoneYet) {
  v1::ProvenanceResponse p;
  p.set_generation(2);
  *p.add_nodes() = Record("n1", "INFO");
  EXPECT_THAT(RenderProvenance(p), HasSubstr("first step  - (trainsupd has seen none)\n"));
  *p.mutable_first_step() = First(4001, 3e-4, 256);
  EXPECT_THAT(RenderProvenance(p),
              HasSubstr("first step  4001 (4 ranks): learning rate 0.0003, 256 samples, 0 tokens\n"));
  v1::ProvenanceResponse b = p;
  b.mutable_first_step()->set_learning_rate(1e-4);
  EXPECT_THAT(RenderProvenanceDiff(MakeProvenanceDiff(p, b)),
              HasSubstr("first_step.learning_rate  0.0003 -> 0.0001\n"));
}

}  // namespace
}  // namespace trainsup
