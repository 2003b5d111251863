#!/usr/bin/env bash
# The worked example of docs/engine-decision.md, SIMULATED: which engine setting gives the most tokens per GPU
# at the interactivity we need, and what a million tokens cost there. Two simulated GPUs (llmload sim's
# l40-qwen3-8b and h100-llama-8b profiles), three --max-num-seqs settings each, one settings sweep per GPU
# (the simulator restarted for every setting), then one comparison with both Pareto fronts.
#
#   bash benchmarks/engine_decision.sh [OUT]        # about 5 minutes on 2 cores; OUT defaults to engine-decision
#
# The GPU prices are assumptions for the example (USD per GPU-hour), not quotes.
set -euo pipefail
OUT=${1:-engine-decision}
PORT=${PORT:-18600}
run() {  # profile gpu-type price
    llmload sweep --serve-cmd "llmload sim --port $PORT --profile $1 --max-num-seqs {max_num_seqs}" \
        --serve-params max_num_seqs=8,32,128 --base-url "http://127.0.0.1:$PORT" \
        --concurrencies 8,32,128 --num-prompts 128 --sharegpt-output-len 64 --ignore-eos --no-initial-test \
        --slo ttft:1000,tpot:50 --goodput-target 0.95 --gpus 1 --gpu-type "$2" --gpu-hour-cost "$3" \
        --label "$2" --output "$OUT/$1" --no-figures
}
run l40-qwen3-8b L40 0.90
run h100-llama-8b H100 2.50
llmload compare "$OUT/l40-qwen3-8b" "$OUT/h100-llama-8b" --output "$OUT/compare"
echo "Pareto fronts: $OUT/compare/sweep_pareto.png (points: $OUT/compare/pareto.json)"
