#!/bin/bash
# `scripts/slurm/requeue.sh <command>`: run a batch script's command (`dvc exp run ...`) so that the job survives its
# time limit or a preemption, as the sbatch templates here do. With `#SBATCH --signal=B:USR1@600` SLURM sends this
# shell SIGUSR1 ten minutes before the end; it asks the training stage running under the command to checkpoint at its
# next step boundary and stop (`python -m a5core.stage.launch --preempt`: SIGUSR1 to the stage's process or launcher;
# the stage exits 75), then requeues the job (`scontrol requeue`, which `#SBATCH --requeue` allows). The requeued job
# runs the same command: finished stages are cached, the preempted one continues from its checkpoint. With no
# training stage running (an evaluation stage, say) it requeues at once: that stage starts again in the next job.
# DVC exits 255 whatever its stage's status, so the rule is: the signal came and the command failed.
set -uo pipefail
trap '' USR1  # inherited by what runs below: DVC and the shells between this script and a stage ignore it
"$@" &
child=$!
preempted=""
requeue() {
    echo "a5: requeueing SLURM job ${SLURM_JOB_ID:-?}: the next run of the same command continues" >&2
    [ -n "${SLURM_JOB_ID:-}" ] && scontrol requeue "$SLURM_JOB_ID"
}
on_usr1() {
    preempted=1
    python -m a5core.stage.launch --preempt "$child" || requeue  # no stage took it: nothing to wait for
}
trap on_usr1 USR1
status=0
while :; do
    wait "$child" && status=0 || status=$?
    kill -0 "$child" 2>/dev/null || break  # the wait ended for a signal, not because the command did: wait again
done
if [ -n "$preempted" ] && [ "$status" -ne 0 ]; then
    requeue
fi
exit "$status"
