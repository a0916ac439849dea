# Sourced by the scripts that run a profile's DAG in a clone of this commit (cpu_study.sh, leaderboard.sh), so that
# the workspace keeps the default profile's results. `enter_clone DIR` clones the repo into DIR (once), moves it to
# this commit's code while keeping the clone's own state (dvc.lock and the tracked results it wrote are stashed across
# the checkout and put back; params.yaml and conf/config.yaml are written again by the caller's `tools.profile`),
# links this workspace's .venv and activates it, with the clone's own code first on PYTHONPATH (the .venv installs this
# workspace's a5core in editable mode: without it, a stage script in the clone would import the workspace's a5core,
# edits in progress included). Stages are cached and resume: a rerun continues where it stopped.
enter_clone() {
  local root=$PWD dir=$1
  [ -d "$dir/.git" ] || git clone -q "$root" "$dir"
  cd "$dir"
  git fetch -q "$root" HEAD
  git checkout -q -- params.yaml conf/config.yaml
  git stash push -q -- dvc.lock results reports models/.gitignore
  git checkout -q --detach FETCH_HEAD
  if git stash list | grep -q .; then git checkout stash@{0} -- dvc.lock results reports models/.gitignore && git stash drop -q; fi
  ln -sfn "$root/.venv" .venv
  . .venv/bin/activate
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
}
