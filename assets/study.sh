# What the studies' run.sh share; each sources it from the repo root, sets OUT with study_out and makes $OUT/logs;
# the functions below read DATA_DIR, DATASET, RUNS, OUT and TRAIN_ARGS when called.

# study_out STUDY: OUT, where assets/STUDY/run.sh writes. An OUT given is kept as it is (a rerun into it writes over
# what it writes again); STORE=1 is assets/STUDY, the stored results the pages quote, written over; by default a fresh
# out-study-STUDY in RUNS (the repo root unless given), refused if it holds anything: a half-old folder never looks
# complete.
study_out() {
  local me="assets/$1/run.sh: error:"
  case ${STORE:-} in
    ''|0) ;;
    1) if [ -n "${OUT:-}" ]; then
         echo "$me STORE=1 and OUT=$OUT: give one of them (STORE=1 writes into assets/$1)" >&2; exit 1
       fi
       OUT=assets/$1; return ;;
    *) echo "$me STORE=$STORE: set STORE=1 to write over assets/$1, or leave STORE unset" >&2; exit 1 ;;
  esac
  if [ -n "${OUT:-}" ]; then return; fi
  OUT=${RUNS:-.}/out-study-$1 OUT=${OUT#./}
  if [ -e "$OUT" ] && [ -n "$(ls -A "$OUT")" ]; then
    echo "$me $OUT is not empty: remove it, or set OUT=$OUT to write into it" >&2; exit 1
  fi
}

prepare_wt103() {  # prepare_wt103 TOKENIZER: WikiText-103's validation text to train on, its test text to validate
  [ -d "$DATA_DIR/$DATASET" ] && return
  python prepare.py --train_file "${WT103:?set WT103 to the folder holding wiki.valid.tokens}/wiki.valid.tokens" \
      --val_file "$WT103/wiki.test.tokens" --tokenizer "$1" --out_dir "$DATA_DIR/$DATASET"
}

train() {  # train NAME SETTINGS...: $TRAIN (train.py; python -m beyond.exit_train for exit-aware runs) into
  local name=$1; shift  # $RUNS/out-NAME; its output in logs/NAME.log, its log.jsonl copied
  python ${TRAIN:-train.py} "$@" --data_dir="$DATA_DIR" --dataset="$DATASET" --out_dir="$RUNS/out-$name" $TRAIN_ARGS \
      > "$OUT/logs/$name.log" 2>&1 || { tail -n 20 "$OUT/logs/$name.log" >&2; return 1; }
  cp "$RUNS/out-$name/log.jsonl" "$OUT/logs/$name.jsonl"
}

timed_train() {  # timed_train NAME RUN SETTINGS...: train.py on one thread into $RUNS/out-RUN, its output in logs/NAME.log
  local name=$1 run=$2 TIMEFORMAT=%R; shift 2  # and its wall time (seconds) in logs/NAME.seconds
  { time OMP_NUM_THREADS=1 python train.py "$@" --data_dir="$DATA_DIR" --dataset="$DATASET" --out_dir="$RUNS/out-$run" \
      $TRAIN_ARGS > "$OUT/logs/$name.log" 2>&1; } 2> "$OUT/logs/$name.seconds" \
      || { tail -n 20 "$OUT/logs/$name.log" >&2; return 1; }
}

# each task study's scoring (python -m beyond.tasks' settings: the lengths, the K, the strings, the fast path), its
# run.sh's TASK_ARGS by default: parity's (assets/parity/deep, reach) and addition's (assets/addition, retries, reach)
PARITY_SCORING="--lengths=64,512,2048 --loops=$(seq -s, 64 64 3200) --rows=64 --halt=latent --compile=on"
ADDITION_SCORING="--lengths=64,1024 --loops=$(seq -s, 64 64 1536) --rows=64 --halt=latent --compile=on"

# task_seed TASK CONFIG SEED DATA_SEED: a seed of a task study (assets/parity/deep, assets/addition): python -m
# beyond.TASK's data into DATA_DIR/TASK-DATA_SEED (with $PREP_ARGS; kept if there), the run $RUNS/out-NAME-sSEED from
# CONFIG (NAME: $RUN_NAME, or TASK), and its scoring on $TEST_SEED's strings with $TASK_ARGS into $OUT/scores/sSEED;
# each part's wall seconds in logs/NAME-sSEED.wall and logs/score-sSEED.wall. A seed already scored in an OUT given is
# kept as it is: a study stopped part way, run again into its OUT, goes on from the seeds it had not finished
# (STORE=1 makes every seed anew)
task_seed() {
  local task=$1 config=$2 s=$3 d=$4 name=${RUN_NAME:-$1} TIMEFORMAT=%R
  if [ "${STORE:-}" != 1 ] && [ -s "$OUT/scores/s$s/results.json" ] && [ -s "$OUT/scores/s$s/accuracy.png" ]; then
    return
  fi
  task_data "$task" "$d"
  { time DATASET=$task-$d train "$name-s$s" "$config" --seed="$s"; } 2> "$OUT/logs/$name-s$s.wall"
  # shellcheck disable=SC2086  # each word a setting
  score_run "$RUNS/out-$name-s$s" "$OUT/scores/s$s" "score-s$s" $TASK_ARGS
}

# task_data TASK DATA_SEED: python -m beyond.TASK's data into DATA_DIR/TASK-DATA_SEED (with $PREP_ARGS), unless there
task_data() {
  # shellcheck disable=SC2086  # each word a setting
  [ -f "$DATA_DIR/$1-$2/meta.json" ] || python -m "beyond.$1" --out_dir "$DATA_DIR/$1-$2" --seed="$2" \
      $PREP_ARGS > "$OUT/logs/prepare-$2.log"
}

# score_run RUN DIR NAME SETTINGS...: python -m beyond.tasks on RUN ($TEST_SEED's strings, SETTINGS) into DIR, its
# tables and notes in $OUT/logs/NAME.log and its wall seconds alone in $OUT/logs/NAME.wall; a failure shows the log's tail
score_run() {
  local run=$1 dir=$2 name=$3 TIMEFORMAT=%R; shift 3
  { time python -m beyond.tasks --runs="$run" --seed="$TEST_SEED" --out="$dir" "$@" > "$OUT/logs/$name.log" 2>&1; } \
      2> "$OUT/logs/$name.wall" || { tail -n 20 "$OUT/logs/$name.log" >&2; return 1; }
}

# merge_scores INTO SCORES...: each seed's SCORES/s<seed>/results.json (the array seeds) of each SCORES tabled together
# into INTO/accuracy.md (results.json, accuracy.png beside it)
merge_scores() {
  local into=$1 merge scores s; shift
  merge=$(for scores in "$@"; do for s in "${seeds[@]}"; do printf '%s,' "$scores/s$s/results.json"; done; done)
  python -m beyond.tasks --merge="${merge%,}" --out="$into" > "$into/accuracy.md"
}

# task_seeds STUDY: the arrays seeds ($SEEDS) and data ($DATA_SEEDS), one data seed a run, else one error line
task_seeds() {
  read -ra seeds <<< "$SEEDS"
  read -ra data <<< "$DATA_SEEDS"
  if [ ${#seeds[@]} != ${#data[@]} ]; then
    echo "assets/$1/run.sh: error: SEEDS has ${#seeds[@]} seeds and DATA_SEEDS ${#data[@]}: give one data seed a run" >&2
    exit 1
  fi
}

# task_study STUDY TASK CONFIG: a task study (assets/parity/deep, assets/addition): OUT (study_out STUDY), then
# task_seed for each seed of $SEEDS with its data seed of $DATA_SEEDS (the arrays seeds and data), two at once, and the
# scorings merged into $OUT/accuracy.md (results.json, accuracy.png beside it)
task_study() {
  local study=$1 task=$2 config=$3 i
  study_out "$study"
  task_seeds "$study"
  mkdir -p "$OUT/logs" "$OUT/scores"
  for i in "${!seeds[@]}"; do lane task_seed "$task" "$config" "${seeds[$i]}" "${data[$i]}"; done
  wait_lanes
  merge_scores "$OUT" "$OUT/scores"
}

# design_study STUDY TASK CONFIG: the blind-spot designs in a task's recipe (assets/parity/reach-designs,
# assets/addition/reach-designs): OUT (study_out STUDY); the data of each seed of $DATA_SEEDS; for each seed of $SEEDS
# (the outer loop: a study stopped part way has every design on its first seeds) and design of $CONDITIONS (each
# READOUT[-il]... of parity_design), task_seed with that design's settings into OUT/DESIGN, the run
# $RUNS/out-TASK-DESIGN-sSEED, two at once; then each design's scorings merged, what its select read (evals.md) and
# what each run cost (costs.md) in OUT/DESIGN, and every design's scorings, with the recipe's in $RECIPE/s<seed> where
# given, merged into OUT/accuracy.md (results.json, accuracy.png beside it). With RESCUE_ARGS, each run of a seed of
# RESCUE_SEEDS (all of SEEDS unless given) is also scored with those settings (the clamp and the cap: the
# training-free rescues of beyond.tasks' --interventions) into OUT/DESIGN/rescue/s<seed>, and those scorings merged
# into OUT/rescue/accuracy.md: which design each intervention turns from failing to passing, or the other way
design_study() {
  local study=$1 task=$2 config=$3 i c d s all=() logs
  study_out "$study"
  task_seeds "$study"
  for c in $CONDITIONS; do parity_design "$c" > /dev/null; mkdir -p "$OUT/$c/logs" "$OUT/$c/scores"; done  # (a bad name stops here)
  mkdir -p "$OUT/logs"
  for d in "${data[@]}"; do task_data "$task" "$d"; done  # each seed's data before any run: two lanes never make one folder at once
  for i in "${!seeds[@]}"; do
    for c in $CONDITIONS; do lane design_seed "$task" "$config" "$c" "${seeds[$i]}" "${data[$i]}"; done
  done
  wait_lanes
  for c in $CONDITIONS; do
    merge_scores "$OUT/$c" "$OUT/$c/scores"
    # the seeds merged alone: a run of another seed in OUT is in no results.json, and would read as failing each bar
    logs=(); for s in "${seeds[@]}"; do logs+=("$OUT/$c/logs/$task-$c-s$s.jsonl"); done
    python assets/parity/evals.py --results="$OUT/$c/results.json" "${logs[@]}" > "$OUT/$c/evals.md"
    python assets/task_costs.py "$OUT/$c" --seeds="${seeds[*]}" > "$OUT/$c/costs.md"
    all+=("$OUT/$c/scores")
  done
  merge_scores "$OUT" "${all[@]}" ${RECIPE:+"$RECIPE"}
  local rescued=(); for s in "${seeds[@]}"; do if rescues "$s"; then rescued+=("$s"); fi; done
  if [ ${#rescued[@]} -gt 0 ]; then  # (none where no seed of SEEDS is one of RESCUE_SEEDS)
    all=(); for c in $CONDITIONS; do all+=("$OUT/$c/rescue"); done
    mkdir -p "$OUT/rescue"
    (seeds=("${rescued[@]}"); merge_scores "$OUT/rescue" "${all[@]}")  # (those seeds' rescue scorings alone)
  fi
}
rescues() { [ -n "${RESCUE_ARGS:-}" ] && [[ " ${RESCUE_SEEDS:-$SEEDS} " == *" $1 "* ]]; }  # rescues SEED: its runs rescored
design_seed() {  # design_seed TASK CONFIG DESIGN SEED DATA_SEED: task_seed with DESIGN's settings, into OUT/DESIGN; then
  local out=$OUT/$3 run=$RUNS/out-$1-$3-s$4  # its rescue scoring, where RESCUE_ARGS asks one of this seed
  OUT=$out RUN_NAME=$1-$3 TRAIN_ARGS="$TRAIN_ARGS $(parity_design "$3")" task_seed "$1" "$2" "$4" "$5"
  if rescues "$4" && { [ "${STORE:-}" = 1 ] || ! [ -s "$out/rescue/s$4/results.json" ]; }; then
    # shellcheck disable=SC2086  # each word a setting
    OUT=$out score_run "$run" "$out/rescue/s$4" "score-rescue-s$4" $RESCUE_ARGS
  fi
}

lanes=()
lane() {  # lane COMMAND...: in the background with one thread; at most two at once (a 2-core machine): with two
  OMP_NUM_THREADS=1 "$@" & lanes+=($!)  # running, it returns when either ends (the other runs on), a failure its status
  if [ ${#lanes[@]} = 2 ]; then wait_lane; fi
}
wait_lane() {  # until one lane ends: wait's status for it (bash 3.2's wait has no -n)
  local p q rest
  while true; do
    for p in "${lanes[@]}"; do
      kill -0 "$p" 2> /dev/null && continue
      rest=(); for q in "${lanes[@]}"; do [ "$q" = "$p" ] || rest+=("$q"); done
      lanes=(${rest[@]+"${rest[@]}"})
      wait "$p"; return
    done
    sleep 0.2
  done
}
wait_lanes() { local p; for p in "${lanes[@]}"; do wait "$p"; done; lanes=(); }

train_grid() {  # train_grid NAME CONFIG SETTINGS...: train NAME from CONFIG, SETTINGS and --seed for every seed of
  local name=$1 config=$2 s c n; shift 2  # $SEEDS and condition of $CONDITIONS, {s} and {c} in NAME and CONFIG
  for s in $SEEDS; do                     # standing for them; one after the other, or with RUN_WITH=lane two at once
    for c in $CONDITIONS; do
      n=${name//\{c\}/$c}
      ${RUN_WITH:-} train "${n//\{s\}/$s}" "${config//\{c\}/$c}" "$@" --seed="$s"
    done
  done
  if [ -n "${RUN_WITH:-}" ]; then wait_lanes; fi
}

parity_design() {  # parity_design NAME: the settings of READOUT[-il][-pen][-damp][-noinj][-fixed] (the inter-loop
  local parts part il=False  # norm off unless -il), on top of config/parity.py (assets/parity/designs, assets/parity/seeds)
  IFS=- read -ra parts <<< "$1"
  printf -- '--readout=%s' "${parts[0]}"
  for part in "${parts[@]:1}"; do
    case $part in
      il) il=True ;;
      pen) printf ' --norm_penalty=0.01' ;;
      damp) printf ' --damping=True' ;;
      noinj) printf ' --inject=False' ;;
      fixed) printf ' --random_depth=False' ;;
      *) echo "unknown design part '$part' in '$1' (READOUT[-il][-pen][-damp][-noinj][-fixed])" >&2; return 1 ;;
    esac
  done
  printf ' --interloop_norm=%s' "$il"
}

parity_rules() {  # parity_rules RUNS BITS...: rules.py's checkpoint rules on RUNS (comma-separated) against each bar,
  local runs=$1 bits loops name; shift  # 32 into $OUT/rules.md, others into rules-BITS.md (their strings scored to
  for bits in "$@"; do                  # K=256, the bar's deepest); with $TEST_SEED, $LOOPS, $RULES_ARGS, $TASK_ARGS
    if [ "$bits" = 32 ]; then loops=$LOOPS name=rules.md; else loops=${LOOPS%,384} name=rules-$bits.md; fi
    # shellcheck disable=SC2086  # each word a setting
    python assets/parity/rules.py --runs="$runs" --seed="$TEST_SEED" --loops="$loops" --bits="$bits" \
        ${RULES_ARGS:-} $TASK_ARGS > "$OUT/$name"
  done
}
