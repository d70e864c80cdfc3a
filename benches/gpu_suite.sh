#!/bin/bash
# Everything to measure on a machine with a real GPU, each stage time-boxed
# so that one slow step does not take the others' time:
#
#     benches/gpu_suite.sh OUT_DIR [STAGE ...]
#
# Stages, in order (all by default): tests, run, call, tune, sweep, spaces.
# Each writes OUT_DIR/<stage>.log (and its JSON or recordings beside it);
# STAGE_SECONDS_<stage> overrides a stage's time box. At its limit a stage
# gets SIGINT, so pytest still prints its summary. Needs the package
# installed and a GPU adapter; the tests run with CI=true, so a missing
# adapter fails rather than skips. `benches/report.py` renders the JSON
# the stages write into BENCHMARKS.md's GPU tables.
set -u
out=${1:?usage: benches/gpu_suite.sh OUT_DIR [STAGE ...]}
shift
mkdir -p "$out"
known=(tests run call tune sweep spaces)
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=("${known[@]}")
for s in "${stages[@]}"; do
  [[ " ${known[*]} " == *" $s "* ]] || { echo "unknown stage: $s (${known[*]})"; exit 2; }
done
export PYTHONUNBUFFERED=1
start=$(date +%s)

stage() { # NAME DEFAULT_SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  local var="STAGE_SECONDS_$name"
  limit=${!var:-$limit}
  echo "== $name (up to $limit s) at $(($(date +%s) - start)) s"
  timeout -s INT -k 15 "$limit" "$@" > "$out/$name.log" 2>&1
  echo "   exit $? at $(($(date +%s) - start)) s; last lines:"
  tail -n 12 "$out/$name.log" | sed 's/^/   /'
}

xdist=()  # pytest-xdist, where installed, runs the tests on every core
python3 -c "import xdist" 2> /dev/null && xdist=(-n "$(nproc)")

for s in "${stages[@]}"; do
  case $s in
    tests) CI=true stage tests 150 python3 -m pytest tests "${xdist[@]}" -v -p no:cacheprovider \
      --tb=short --ignore=tests/test_distributed.py --ignore=tests/test_ray_nodes.py \
      --ignore=tests/test_package.py --ignore=tests/test_codebase.py ;;
    run) stage run 150 python3 benches/run.py --warmup 0.1 --rep 0.4 \
      --json "$out/run.json" --plot "$out/sweep.png" ;;
    call) stage call 90 python3 benches/gpu_call.py ;;
    tune) stage tune 150 python3 benches/tune.py --device gpu --efforts quick \
      --launches 10,500 --json "$out/tune.json" ;;
    sweep) stage sweep 120 python3 benches/sweep.py softmax --size rows=65536 --size cols=128 ;;
    spaces) stage spaces 200 python3 benches/record_spaces.py --device gpu --out "$out/spaces" \
      --shape 65536x128 --shape 4096x4096 --shape 512x32768 ;;
  esac
done
