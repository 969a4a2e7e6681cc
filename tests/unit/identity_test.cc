#include "identity/identity.h"

#include <catch2/catch.hpp>

#include "helpers.h"

using namespace rankcheck;
using rankcheck::test::env_fixture;

TEST_CASE("identity: torchrun worker") {
  Identity id = detect_identity(env_fixture("torchrun_worker.env"), {});
  CHECK(id.usable());
  CHECK(id.rank == 5);
  CHECK(id.world_size == 16);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 4);
  CHECK(id.node_rank == 1);
  CHECK(id.nnodes == 4);
  CHECK(id.master_addr == "node01");
  CHECK(id.master_port == 29500);
  CHECK(id.job_id == "job7");
  CHECK(id.launcher == "torch");
  CHECK(id.launchers == std::vector<std::string>{"torch", "torchrun"});
  CHECK(id.conflicts.empty());
}

TEST_CASE("identity: Slurm srun, MASTER_ADDR from the first host of the step") {
  Identity id = detect_identity(env_fixture("slurm_srun.env"), {});
  REQUIRE(id.usable());
  CHECK(id.rank == 5);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == 1);
  CHECK(id.local_world_size == 4);  // this node's entry of SLURM_STEP_TASKS_PER_NODE
  CHECK(id.node_rank == 1);
  CHECK(id.nnodes == 2);
  CHECK(id.job_id == "48213.0");  // the step's: two steps of a job are two jobs
  CHECK(id.launcher == "slurm");
  CHECK(id.master_addr == "gpu-01");
  CHECK(id.master_port == 29500);
  CHECK(id.node_list == "gpu-[01-02]");
  CHECK(id.tasks_per_node == "4(x2)");
  CHECK(id.distribution == Distribution::kBlock);
  CHECK(id.notes ==
        std::vector<std::string>{
            "MASTER_PORT not set: using 29500",
            "MASTER_ADDR not set: using gpu-01, the first host of the Slurm node list"});
}

TEST_CASE("identity: SLURM_PROCID=3 but RANK=5 is a conflict, and RANK is used") {
  Identity id = detect_identity(env_fixture("slurm_rank_conflict.env"), {});
  CHECK(id.usable());
  CHECK(id.rank == 5);
  REQUIRE(id.conflicts.size() == 1);
  const Conflict& c = id.conflicts[0];
  CHECK(c.field == Field::kRank);
  REQUIRE(c.values.size() == 2);
  CHECK(c.values[0].variable == "RANK");
  CHECK(c.values[0].value == "5");
  CHECK(c.values[1].variable == "SLURM_PROCID");
  CHECK(c.values[1].value == "3");
}

TEST_CASE("identity: a Slurm job id carries the step only where srun started the task") {
  EnvMap env = env_fixture("slurm_srun.env");
  env.erase("SLURM_STEP_ID");  // a prolog, a batch script
  CHECK(detect_identity(env, {}).job_id == "48213");
  env["SLURM_STEP_ID"] = "3";
  CHECK(detect_identity(env, {}).job_id == "48213.3");
  // mpirun inside the allocation: its ranks' SLURM_STEP_ID differs from node to node.
  env["OMPI_COMM_WORLD_SIZE"] = "8";
  env["OMPI_COMM_WORLD_RANK"] = "5";
  CHECK(detect_identity(env, {}).job_id == "48213");
}

TEST_CASE("identity: torchrun inside srun does not read the agent's SLURM_PROCID as the rank") {
  Identity id = detect_identity(env_fixture("torchrun_in_slurm.env"), {});
  CHECK(id.usable());
  CHECK(id.rank == 6);
  CHECK(id.node_rank == 1);
  CHECK(id.conflicts.empty());
  CHECK(id.job_id == "48213");  // TORCHELASTIC_RUN_ID, same value as SLURM_JOB_ID here
}

TEST_CASE("identity: Open MPI") {
  Identity id = detect_identity(env_fixture("openmpi.env"), {});
  CHECK(id.usable());
  CHECK(id.rank == 3);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == 3);
  CHECK(id.local_world_size == 4);
  CHECK(id.master_port == 29600);
  CHECK(id.launcher == "openmpi");
  CHECK(id.job_id.empty());
}

TEST_CASE("identity: OMPI size 8 but WORLD_SIZE=16 is a conflict") {
  Identity id = detect_identity(env_fixture("openmpi_world_conflict.env"), {});
  REQUIRE(id.conflicts.size() == 1);
  CHECK(id.conflicts[0].field == Field::kWorldSize);
  CHECK(id.world_size == 16);  // WORLD_SIZE is what the training job reads
  CHECK(id.conflicts[0].values[1].variable == "OMPI_COMM_WORLD_SIZE");
}

TEST_CASE("identity: MPICH / PMI") {
  Identity id = detect_identity(env_fixture("pmi.env"), {});
  CHECK(id.usable());
  CHECK(id.rank == 6);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == 2);
  CHECK(id.local_world_size == 4);
  CHECK(id.launcher == "pmi");
}

TEST_CASE("identity: flags beat the environment, and a disagreement is still reported") {
  Flags flags;
  flags.rank = "2";
  flags.master_port = "29999";
  Identity id = detect_identity(env_fixture("torchrun_worker.env"), flags);
  CHECK(id.rank == 2);
  CHECK(id.launcher == "flags");
  CHECK(id.master_port == 29999);
  REQUIRE(id.conflicts.size() == 2);  // rank: --rank vs RANK and ROLE_RANK; the port
  CHECK(id.conflicts[0].field == Field::kRank);
  CHECK(id.conflicts[0].values.size() == 3);
  CHECK(id.conflicts[1].field == Field::kMasterPort);
}

TEST_CASE("identity: flags alone") {
  Flags flags;
  flags.rank = "0";
  flags.world_size = "1";
  Identity id = detect_identity({}, flags);
  CHECK(id.usable());
  CHECK(id.master_addr == "127.0.0.1");
  CHECK(id.notes.back() == "MASTER_ADDR not set: a job of one rank uses 127.0.0.1");
}

TEST_CASE("identity: a missing value names the variables and launchers that would set it") {
  Identity id = detect_identity(env_fixture("plain_no_master.env"), {});
  REQUIRE(id.problems.size() == 1);
  CHECK(id.problems[0] ==
        "cannot tell where the master is: none of --master-addr (command-line flag), "
        "MASTER_ADDR (torch env), PET_MASTER_ADDR (Kubeflow PET_*) is set");

  Identity none = detect_identity({}, {});
  REQUIRE(none.problems.size() == 3);
  CHECK(none.problems[0] ==
        "cannot tell this process's rank: none of --rank (command-line flag), RANK (torch env), "
        "ROLE_RANK (torchrun), SLURM_PROCID (Slurm srun), OMPI_COMM_WORLD_RANK (Open MPI "
        "mpirun), PMI_RANK (MPICH/PMI) is set");
}

TEST_CASE("identity: an unparsable value is a usage problem naming the variable") {
  Identity id = detect_identity(env_fixture("bad_rank.env"), {});
  CHECK(!id.usable());
  CHECK(id.problems[0] == "RANK='three' is not a whole number (set by torch env)");
}

TEST_CASE("identity: bounds") {
  EnvMap env{{"RANK", "0"}, {"WORLD_SIZE", "0"}, {"MASTER_ADDR", "x"}, {"MASTER_PORT", "70000"}};
  Identity id = detect_identity(env, {});
  CHECK(id.problems == std::vector<std::string>{"world size 0 is outside 1..1048576",
                                                "master port 70000 is outside 1..65535"});
  // A rank outside the world still joins: the master reports it next to the others.
  env = {{"RANK", "9"}, {"WORLD_SIZE", "8"}, {"MASTER_ADDR", "x"}};
  id = detect_identity(env, {});
  CHECK(id.usable());
  CHECK(!(id.rank >= 0 && id.rank + id.nranks <= id.world_size));  // out of range
}

TEST_CASE("identity: node mode stands for nproc-per-node consecutive ranks") {
  Flags flags;
  flags.nproc_per_node = "4";
  flags.node_rank = "1";
  flags.nnodes = "2";
  flags.master_addr = "node01";
  Identity id = detect_identity({}, flags);
  REQUIRE(id.usable());
  CHECK(id.node_mode());
  CHECK(id.rank == 4);
  CHECK(id.nranks == 4);
  CHECK(id.world_size == 8);
  CHECK(id.local_world_size == 4);
}

TEST_CASE("identity: the Slurm cyclic distribution is kept for the layout") {
  EnvMap env = env_fixture("slurm_srun.env");
  env["SLURM_DISTRIBUTION"] = "cyclic:block";
  CHECK(detect_identity(env, {}).distribution == Distribution::kCyclic);
}

TEST_CASE("env text: comments, export, bad lines") {
  auto env = test::parse_env_text("# c\nexport A=1\n\nB=x=y\r\n");
  REQUIRE(env.ok());
  CHECK(env->at("A") == "1");
  CHECK(env->at("B") == "x=y");
  CHECK(test::parse_env_text("A=1\nnonsense\n").error().message ==
        "line 2: expected KEY=VALUE, got 'nonsense'");
}

TEST_CASE("identity: Kubeflow v1 pod-level RANK and process-level WORLD_SIZE are understood") {
  Identity id = detect_identity(env_fixture("kubeflow_v1_init.env"), {});
  REQUIRE(id.usable());
  CHECK(id.node_mode());
  CHECK(id.node_rank == 1);
  CHECK(id.rank == 4);  // node 1 of nodes of 4: ranks 4-7
  CHECK(id.nranks == 4);
  CHECK(id.world_size == 8);
  CHECK(id.master_addr == "train-master-0");
  CHECK(id.master_port == 23456);
  CHECK(id.conflicts.empty());

  Identity pods = detect_identity(env_fixture("kubeflow_v1_pods.env"), {});
  REQUIRE(pods.usable());
  CHECK(pods.world_size == 8);  // 2 pods x 4
  CHECK(pods.nnodes == 2);
  CHECK(pods.conflicts.empty());
}

TEST_CASE("identity: Kubeflow Trainer v2 / JobSet pod, node mode from PET_*") {
  Identity id = detect_identity(env_fixture("trainer_v2.env"), {});
  REQUIRE(id.usable());
  CHECK(id.rank == 4);
  CHECK(id.nranks == 4);
  CHECK(id.world_size == 8);
  CHECK(id.master_addr == "train-node-0-0.train");
  CHECK(id.launcher == "kubeflow");
  CHECK(id.conflicts.empty());  // JOB_COMPLETION_INDEX agrees with PET_NODE_RANK
  // JOB_COMPLETION_INDEX restarts in each job of a JobSet: it never overrides or
  // contradicts another source, and is used only alone.
  EnvMap env = env_fixture("trainer_v2.env");
  env["JOB_COMPLETION_INDEX"] = "0";
  Identity other_job = detect_identity(env, {});
  CHECK(other_job.conflicts.empty());
  CHECK(other_job.node_rank == 1);
  EnvMap only_index{{"JOB_COMPLETION_INDEX", "1"},
                    {"NNODES", "2"},
                    {"NPROC_PER_NODE", "4"},
                    {"MASTER_ADDR", "m"}};
  Identity alone = detect_identity(only_index, {});
  REQUIRE(alone.usable());
  CHECK(alone.rank == 4);
}

TEST_CASE("identity: an elastic node range is named as such") {
  EnvMap env{{"PET_NNODES", "1:3"},
             {"PET_NPROC_PER_NODE", "4"},
             {"PET_NODE_RANK", "0"},
             {"PET_MASTER_ADDR", "m"}};
  Identity id = detect_identity(env, {});
  REQUIRE(!id.problems.empty());
  CHECK(id.problems[0] ==
        "PET_NNODES='1:3' is not a whole number (set by Kubeflow PET_*): an elastic range; "
        "rankcheck checks a job of a fixed size, pass --nnodes N");
}

TEST_CASE("identity: a torchrun worker in a Kubeflow pod is one rank") {
  Identity id = detect_identity(env_fixture("torchrun_in_kubeflow.env"), {});
  REQUIRE(id.usable());
  CHECK(!id.node_mode());
  CHECK(id.rank == 6);
  CHECK(id.conflicts.empty());
}

TEST_CASE("identity: PET_NPROC_PER_NODE=auto needs a number from the user") {
  Identity id = detect_identity(env_fixture("nproc_auto.env"), {});
  REQUIRE(id.problems.size() >= 1);
  CHECK(id.problems[0] ==
        "PET_NPROC_PER_NODE='auto' is not a whole number (set by Kubeflow PET_*): torchrun's "
        "auto/gpu are not known before the GPUs are probed; pass --nproc-per-node N");
  Flags flags;
  flags.nproc_per_node = "8";
  Identity fixed = detect_identity(env_fixture("nproc_auto.env"), flags);
  CHECK(fixed.usable());
  CHECK(fixed.world_size == 16);
}

TEST_CASE("identity: an unparsable value another source overrides is a note, not a stop") {
  EnvMap env{{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}};
  Flags flags;
  flags.rank = "1";
  Identity id = detect_identity(env, flags);
  CHECK(id.usable());
  CHECK(id.rank == 1);
  CHECK(id.notes.front() == "RANK='x' is not a whole number (set by torch env); using --rank=1");
}

TEST_CASE("identity: node mode in a Slurm step of one task per node") {
  Flags flags;
  flags.nproc_per_node = "4";
  flags.node_rank = "1";
  flags.nnodes = "2";
  Identity id = detect_identity(env_fixture("slurm_node_step.env"), flags);
  REQUIRE(id.usable());
  CHECK(id.rank == 4);  // not SLURM_PROCID=1: the step's tasks are not the job's ranks
  CHECK(id.world_size == 8);
  CHECK(id.conflicts.empty());  // SLURM_NODEID agrees with --node-rank
  CHECK(id.master_addr == "gpu-01");
  CHECK(id.job_id == "48213");
}

TEST_CASE("identity: Slurm's plane distribution is not guessed at") {
  EnvMap env = env_fixture("slurm_srun.env");
  env["SLURM_DISTRIBUTION"] = "plane=2";
  Identity id = detect_identity(env, {});
  CHECK(id.node_list == "gpu-[01-02]");
  CHECK(id.tasks_per_node.empty());
  // ...and says so: the master must not read RANK - LOCAL_RANK as a node's first rank.
  CHECK(id.distribution == Distribution::kUnknown);
}

TEST_CASE("identity: MPICH/Intel MPI mpiexec inside Slurm reads PMI, not the proxy's task") {
  // Hydra starts one proxy per node with srun: its ranks inherit the proxy's task
  // (SLURM_PROCID is the node, SLURM_NTASKS the node count).
  EnvMap env{{"SLURM_JOB_ID", "48213"}, {"SLURM_PROCID", "1"},    {"SLURM_NTASKS", "2"},
             {"SLURM_LOCALID", "0"},    {"SLURM_NODEID", "1"},    {"PMI_RANK", "9"},
             {"PMI_SIZE", "16"},        {"MPI_LOCALRANKID", "1"}, {"MASTER_ADDR", "head"}};
  Identity id = detect_identity(env, {});
  REQUIRE(id.usable());
  CHECK(id.rank == 9);
  CHECK(id.world_size == 16);
  CHECK(id.local_rank == 1);
  CHECK(id.launcher == "pmi");
  CHECK(id.conflicts.empty());
  CHECK(id.job_id == "48213");
  CHECK(id.notes.front() ==
        "SLURM_PROCID/SLURM_NTASKS describe the Slurm task of mpiexec's per-node proxy "
        "(PMI_SIZE=16 but SLURM_NTASKS=2), not this process: not used");

  // srun --mpi=pmi2: Slurm sets the PMI variables itself, and they agree with it.
  EnvMap pmi2{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"},
              {"PMI_RANK", "3"},     {"PMI_SIZE", "8"},     {"MASTER_ADDR", "head"}};
  Identity srun = detect_identity(pmi2, {});
  REQUIRE(srun.usable());
  CHECK(srun.rank == 3);
  CHECK(srun.launcher == "slurm");
  CHECK(srun.conflicts.empty());
}

TEST_CASE("identity: a huge node rank or node count is refused before it is multiplied") {
  // 288230376151711745 * 64 wraps to 64 in 64 bits: it must not become rank 64.
  EnvMap env{{"NODE_RANK", "288230376151711745"},
             {"NNODES", "288230376151711745"},
             {"NPROC_PER_NODE", "64"},
             {"MASTER_ADDR", "m"}};
  Identity id = detect_identity(env, {});
  CHECK(!id.usable());
  CHECK(id.rank == -1);
  CHECK(id.world_size == -1);
  CHECK(id.problems == std::vector<std::string>{
                           "288230376151711745 is not a plausible rank or count (limit 1048576)",
                           "288230376151711745 is not a plausible rank or count (limit 1048576)"});
}

TEST_CASE("identity: each field remembers the source it was taken from") {
  EnvMap env{{"RANK", "abc"},
             {"SLURM_PROCID", "3"},
             {"SLURM_NTASKS", "4"},
             {"WORLD_SIZE", "4"},
             {"MASTER_ADDR", "m"}};
  Identity id = detect_identity(env, {});
  REQUIRE(id.usable());
  CHECK(id.rank == 3);
  REQUIRE(id.source(Field::kRank) != nullptr);
  CHECK(id.source(Field::kRank)->variable == "SLURM_PROCID");
  CHECK(id.source(Field::kWorldSize)->variable == "WORLD_SIZE");
  CHECK(id.source(Field::kLocalRank) == nullptr);
}

TEST_CASE("identity: NPROC_PER_NODE from the job script does not make srun's tasks nodes") {
  // The batch script exports NPROC_PER_NODE for a later torchrun; the check step
  // runs one task per rank (4 per node): each is one rank, not a node of 8.
  EnvMap env = env_fixture("slurm_srun.env");
  env["NPROC_PER_NODE"] = "8";
  Identity id = detect_identity(env, {});
  REQUIRE(id.usable());
  CHECK(!id.node_mode());
  CHECK(id.rank == 5);
  CHECK(id.world_size == 8);
  CHECK(id.local_rank == 1);
  CHECK(id.notes.front() ==
        "NPROC_PER_NODE=8 is not used: SLURM_PROCID gives this process a rank of its own, so "
        "it checks one rank (for one probe per node standing for its GPUs, pass "
        "--nproc-per-node)");

  // Under mpirun too.
  EnvMap mpi = env_fixture("openmpi.env");
  mpi["NPROC_PER_NODE"] = "4";
  Identity ompi = detect_identity(mpi, {});
  REQUIRE(ompi.usable());
  CHECK(!ompi.node_mode());
  CHECK(ompi.rank == 3);

  // One task per node is a node-level step: node mode, as before.
  EnvMap node = env_fixture("slurm_node_step.env");
  node["NPROC_PER_NODE"] = "4";
  Identity per_node = detect_identity(node, {});
  REQUIRE(per_node.usable());
  CHECK(per_node.node_mode());
  CHECK(per_node.rank == 4);
  CHECK(per_node.world_size == 8);

  // --nproc-per-node asks for node mode outright.
  Flags flags;
  flags.nproc_per_node = "4";
  Identity asked = detect_identity(node, flags);
  CHECK(asked.node_mode());
  CHECK(asked.rank == 4);
}

TEST_CASE("identity: how many members the launcher itself started") {
  // Open MPI counts its processes; a WORLD_SIZE exported by hand does not.
  Identity id = detect_identity(env_fixture("openmpi_world_conflict.env"), {});
  CHECK(id.launcher_members == 8);
  CHECK(id.launcher_members_from == "OMPI_COMM_WORLD_SIZE=8");
  // srun: SLURM_NTASKS, even where WORLD_SIZE says otherwise.
  EnvMap slurm{
      {"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}};
  id = detect_identity(slurm, {});
  CHECK(id.world_size == 2);
  CHECK(id.launcher_members == 4);
  CHECK(id.launcher_members_from == "SLURM_NTASKS=4");
  // In node mode the launcher's tasks are nodes.
  Flags flags;
  flags.nproc_per_node = "4";
  flags.node_rank = "1";
  flags.nnodes = "2";
  id = detect_identity(env_fixture("slurm_node_step.env"), flags);
  CHECK(id.launcher_members == 2);
  // torch variables alone: no launcher counted anything.
  id = detect_identity(EnvMap{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}}, {});
  CHECK(id.launcher_members == -1);
}

TEST_CASE("identity: a Slurm task without PMI cannot start MPI") {
  EnvMap bare{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_ID", "0"}};
  auto problem = mpi_launch_problem(bare);
  REQUIRE(problem.has_value());
  CHECK(problem->find("srun --mpi=pmix") != std::string::npos);
  CHECK(problem->find("srun --mpi=none, or MpiDefault=none in slurm.conf") != std::string::npos);
  EnvMap pmix = bare;
  pmix["PMIX_RANK"] = "0";
  CHECK(!mpi_launch_problem(pmix));
  EnvMap pmi2 = bare;
  pmi2["PMI_FD"] = "13";
  CHECK(!mpi_launch_problem(pmi2));
  // mpirun, and no launcher at all (a singleton), are MPI's to handle.
  CHECK(!mpi_launch_problem(EnvMap{{"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_PROCID", "0"}}));
  CHECK(!mpi_launch_problem(EnvMap{}));
}

TEST_CASE("identity: the job-wide start time a launch script gives") {
  auto none = job_start_time(EnvMap{});
  REQUIRE(none.ok());
  CHECK(!none->has_value());
  auto t = job_start_time(EnvMap{{"RANKCHECK_START_TIME", "1700000000.250000000"}});
  REQUIRE(t.ok());
  CHECK(**t == Approx(1700000000.25));
  for (const char* bad : {"", "soon", "-5", "1e9", "17000.00.1", ".5", "0"}) {
    auto b = job_start_time(EnvMap{{"RANKCHECK_START_TIME", bad}});
    CHECK(!b.ok());
  }
}
