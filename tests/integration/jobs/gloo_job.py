"""A small torch.distributed job on CPU (gloo), as the job under watch in the tests:
init_process_group from the environment, one all-reduce, and the faults the tests
ask for by variable. JOB_MODE: ok (default), raise (ranks in JOB_BAD raise before
init_process_group), sleep (they never call it), exit (they exit JOB_EXIT at once)."""
import datetime
import os
import sys
import time

# Under srun or mpirun, the job reads its launcher's variables, as a training script does.
for ours, theirs in (("RANK", ("SLURM_PROCID", "OMPI_COMM_WORLD_RANK")),
                     ("WORLD_SIZE", ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"))):
    for var in theirs:
        if ours not in os.environ and var in os.environ:
            os.environ[ours] = os.environ[var]
if "MASTER_ADDR" not in os.environ and "SLURM_STEP_NODELIST" in os.environ:
    import subprocess  # the step's first node, as sbatch scripts find it
    os.environ["MASTER_ADDR"] = subprocess.run(
        ["scontrol", "show", "hostnames", os.environ["SLURM_STEP_NODELIST"]],
        capture_output=True, text=True, check=True).stdout.split()[0]
rank = int(os.environ["RANK"])
mode = os.environ.get("JOB_MODE", "ok")
bad = {int(x) for x in os.environ.get("JOB_BAD", "").split(",") if x}
print(f"rank {rank}: starting", flush=True)
if rank in bad:
    if mode == "raise":
        raise ValueError(f"rank {rank} cannot open its data shard")
    if mode == "sleep":
        print(f"rank {rank}: loading data", flush=True)
        time.sleep(600)
    if mode == "exit":
        sys.exit(int(os.environ.get("JOB_EXIT", "3")))

import torch  # noqa: E402  (after the faults: they come before any import cost)
import torch.distributed as dist  # noqa: E402

timeout = datetime.timedelta(seconds=float(os.environ.get("JOB_PG_TIMEOUT", "60")))
dist.init_process_group("gloo", timeout=timeout)
t = torch.ones(1) * (rank + 1)
dist.all_reduce(t)
print(f"rank {rank}: all_reduce {t.item():g}", flush=True)
time.sleep(float(os.environ.get("JOB_HOLD", "0")))  # a job that trains a while
dist.destroy_process_group()
