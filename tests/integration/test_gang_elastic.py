"""An elastic gang through ``hetflow run`` on this machine (real podman, busybox, CPUs only):
``replicas: {min: 2, max: 4}`` starts with the 2 replicas that fit beside a blocker and,
once the blocker ends, grows to 4 (the 2 replicas stopped with SIGTERM, then all 4 started
again as the next attempt, each told the new WORLD_SIZE)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write

# 2 cores: the blocker holds 1, so 2 replicas of 0.5 fit first and 4 once it ends.  The
# blocker comes first in the file (the greedy planner keeps file order), so it is placed first.
# Replicas run until stopped while the world is smaller than 4 (as training would, saving
# its state under $HETFLOW_CHECKPOINT_DIR); with 4 they finish (never grown: they fail after a minute).
ELASTIC = f"""
apiVersion: hetflow/v1
name: elastic
steps:
  blocker:
    image: {BUSYBOX}
    command: [sleep, "2"]
    resources: {{cpus: 1, memory: 32Mi}}
  train:
    image: {BUSYBOX}
    command:
      - sh
      - -c
      - |
        echo "rank $RANK world $WORLD_SIZE restarts $TORCHELASTIC_RESTART_COUNT nnodes $PET_NNODES"
        echo $WORLD_SIZE > /out/world.txt
        trap 'exit 143' TERM
        i=0; while [ "$WORLD_SIZE" != 4 ] && [ $i -lt 300 ]; do sleep 0.2; i=$((i+1)); done
        [ "$WORLD_SIZE" = 4 ]
    resources: {{cpus: 0.5, memory: 32Mi}}
    outputs: [world.txt]
    checkpoint: {{mode: app}}
    stop_grace: 5s
    gang: {{replicas: {{min: 2, max: 4}}, launcher: torch}}
"""


def test_an_elastic_gang_starts_with_two_and_grows_to_four_when_the_blocker_ends(hf: Hetflow, tmp_path: Path) -> None:
    hf("run", write(tmp_path, ELASTIC), extra_env={"HETFLOW_PLANNER": "greedy", "HETFLOW_GROW_EVERY": "0"})
    rid = hf.last_run()
    shown = hf.show(rid)
    steps = {s["step"]: s for s in shown["steps"]}
    assert (steps["train"]["state"], steps["train"]["attempts"]) == ("succeeded", 2), steps["train"]
    logs = [f for f in (Path(shown["workdir"]) / "logs").rglob("*") if f.is_file()]  # every attempt's, every rank's
    said = [line for f in logs for line in f.read_text().splitlines() if " world " in line]
    # attempt 1: two ranks in a world of 2; attempt 2: four ranks in a world of 4, one restart
    assert sorted(x.split("rank ", 1)[1] for x in said) == [
        "0 world 2 restarts 0 nnodes 2:4",
        "0 world 4 restarts 1 nnodes 2:4",
        "1 world 2 restarts 0 nnodes 2:4",
        "1 world 4 restarts 1 nnodes 2:4",
        "2 world 4 restarts 1 nnodes 2:4",
        "3 world 4 restarts 1 nnodes 2:4",
    ], said
    assert (step_out(hf, rid, "train") / "world.txt").read_text().strip() == "4"
    first, second = steps["train"]["attempt_history"]
    grew = "resized: gang train grows from 2 to 4 replicas (CPUs freed)"
    assert (first["state"], first["message"]) == ("stopped", grew)
    assert (first["cpus"], second["cpus"]) == (1.0, 2.0)  # 2 and then 4 replicas of 0.5
    # the growth came once the blocker had ended (its CPUs freed), not before
    assert first["ended"] >= steps["blocker"]["ended"]
