"""Stage check_params: params.yaml checked, run names included, before the stage of any named run.

DVC deletes a stage's outputs before its command runs, so a `*_runs` key that climbs out of the repo (`x/../../v`)
would make DVC delete a folder outside it before that run's own check (and a bad value of any section would let DVC
delete the outputs of the stage it reaches, logs included). This stage reruns whenever any param changes, and every
stage is downstream of it (fetch_model and prepare_math depend on its output), so `dvc repro` and `dvc exp run` stop
here. It is the one place the whole file is checked (a5core/checks/params.py); the other stages check the sections
they load. It also says, in one line per GRPO, SFT or EI run, which changed fields (against `--lock`, dvc.lock)
the run does not read, and so rerun it for nothing (a5core/checks/unread.py). Its output is always the same text:
no stage reruns because this one did.
"""

from a5core.base.artifacts import write_json
from a5core.base.typed import ConfigError
from a5core.checks.forecast import read_lock
from a5core.checks.params import check_params
from a5core.checks.unread import unread_notes
from a5core.stage import entry


def main() -> None:
    args = entry.args("out", lock=str)
    try:
        params = check_params(args.params)  # every section and every run name (it becomes a path)
    except ConfigError as err:
        entry.refuse(err, args.params)
    if args.lock:  # what the last runs recorded: a GRPO change its run does not read
        for line in unread_notes(params, read_lock(args.lock)):
            print(line, flush=True)
    # these exact bytes since the first release: every stage is downstream of this file, so new text reruns the DAG
    write_json({"params": "passed a5core.config.check_params"}, args.out)


if __name__ == "__main__":
    entry.run(main)  # the project's own errors end in one line
