#!/usr/bin/env bash
# The GPU path's measurements in one go (about 7-9 minutes on an H100 or H200).
# Usage: benchmarks/gpu_check.sh OUT_DIR   (or with $OUT set); run from the repository root
# with the project's Python first on PATH (or PYTHON=/path/to/python).
#
# 1. plain runs (no --phases: the figures to compare) of the three ResNet-18 cases,
#    library vs floor, same device, same process: ratio_vs_floor in resnet_plain.json
#    (acceptance: Reservoir <= 1.2, GSS-Greedy <= 1.5, GSS-IQP <= 2.5). The stream is
#    cut to 5 x 1,000 samples (Table 3 has 5 x 2,000) to fit the time; M = 1,000.
# 2. the same cases with --phases on a shorter stream: where the time goes.
# 3. one GSS-IQP merge at M = 1,000 on the device, split into Gram / solve / bookkeeping.
# 4. the host syncs per online batch (tracked count, plus PyTorch's own sync debug mode).
# 5. the CPU figures of the MLP cases, to check they did not get slower (compare with main).
# 6. where GSS-Greedy's scoring pass goes: the engine on its 110-sample batch, profiled.
# The machine needs the project's dependencies (pyproject.toml) for its Python; where it has
# no package index, bring them as wheels built for that Python and platform.
# A smoke run of this script on a CPU (to check it before spending GPU time):
#   DEVICE=cpu SPT=20 PHASE_SPT=20 MERGE=50 benchmarks/gpu_check.sh /tmp/gpu_check
set -u
OUT_DIR="${1:-${OUT:?give the output folder as \$1 or set \$OUT}}"
PY="${PYTHON:-python}"
DEVICE="${DEVICE:-cuda}"      # where the ResNet cases, the merge and the sync count run
SPT="${SPT:-1000}"            # samples per task of the plain ResNet runs
PHASE_SPT="${PHASE_SPT:-300}" # samples per task of the --phases runs
MERGE="${MERGE:-1000}"        # buffer size M of the timed GSS-IQP merge
DEBUG=""
case "$DEVICE" in cuda*) DEBUG="--cuda-debug" ;; esac
mkdir -p "$OUT_DIR"
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$(pwd)"
CASES="reservoir-resnet-cifar gss-greedy-resnet-cifar gss-iqp-resnet-cifar"
"$PY" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0)
    if torch.cuda.is_available() else 'no CUDA device')" \
    | tee "$OUT_DIR/device.txt"
timeout 270 "$PY" benchmarks/online_throughput.py --device "$DEVICE" --repeats 1 --cases $CASES \
    --impls library floor --samples-per-task "$SPT" --json "$OUT_DIR/resnet_plain.json" \
    2>&1 | tee "$OUT_DIR/resnet_plain.txt"
timeout 90 "$PY" benchmarks/online_throughput.py --device "$DEVICE" --repeats 1 --cases $CASES \
    --impls library floor --samples-per-task "$PHASE_SPT" --phases \
    --json "$OUT_DIR/resnet_phases.json" 2>&1 | tee "$OUT_DIR/resnet_phases.txt"
timeout 60 "$PY" benchmarks/iqp.py --device "$DEVICE" --cases merge-resnet --merge-size "$MERGE" \
    --repeats 5 --json "$OUT_DIR/iqp_merge.json" 2>&1 | tee "$OUT_DIR/iqp_merge.txt"
timeout 60 "$PY" benchmarks/host_syncs.py --device "$DEVICE" --model resnet $DEBUG \
    --json "$OUT_DIR/host_syncs.json" > "$OUT_DIR/host_syncs.txt" 2>&1
grep -v "^  \|Warning\|warn" "$OUT_DIR/host_syncs.txt" | head -20
timeout 90 "$PY" benchmarks/online_throughput.py --device cpu --repeats 1 \
    --cases reservoir-mlp-disjoint gss-greedy-mlp-disjoint --impls library floor \
    --json "$OUT_DIR/mlp_cpu.json" 2>&1 | tee "$OUT_DIR/mlp_cpu.txt"
timeout 90 "$PY" benchmarks/gradient_gram.py --device "$DEVICE" --cases resnet18-n20 resnet18-n110 \
    --repeats 3 --profile --json "$OUT_DIR/gram_profile.json" > "$OUT_DIR/gram_profile.txt" 2>&1
grep -v "^USDT\|^ERROR\|Warning\|warn" "$OUT_DIR/gram_profile.txt" | head -60
