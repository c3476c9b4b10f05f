#!/usr/bin/env bash
# bench/cpu.sh — the CPU benchmarks behind bench/results/cpu.md. Prints markdown on stdout:
#   1. offline: prefill and decode tokens/s per batch size (pagoda bench, 128 in / 128 out)
#   2. online (scheduler): concurrency 1/4/16/64, 128 in / 128 out
#   3. online with a shared 512-token prefix, prefix cache on vs off
#   4. offline and online again with int8 activation blocks (--int8-activations)
#   5. offline and online with an f32 KV cache (--kv-cache-dtype f32; the default is f16)
# Usage: bench/cpu.sh [MODEL] > bench/results/cpu.md   (needs build/pagoda)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-$(scripts/fetch-model)}
BIN=build/pagoda
run() { echo; echo '```'; echo "\$ $*"; echo '```'; echo; "$@"; }
# online "CONCURRENCIES" [FLAGS...]: 128 in / 128 out at each concurrency, 2c prompts (>= 16)
online() {
  local cs=$1; shift
  for c in $cs; do
    run $BIN bench --model "$MODEL" --num-prompts $(( c * 2 > 16 ? c * 2 : 16 )) --concurrency $c \
      --prompt-len 128 --gen-len 128 "$@"
  done
}

echo "# CPU benchmarks"
echo
echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
echo "- load average before the runs: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- model: $(basename "$MODEL")"
echo
echo "## Offline (engine only): prefill and decode tokens/s"
run $BIN bench --model "$MODEL" --prompt-len 128 --gen-len 128 --batch 1,4,16

echo
echo "## Online (scheduler, continuous batching): 128 in / 128 out"
online "1 4 16 64"

echo
echo "## Shared 512-token prefix (16 prompts, 512 shared + 64 own tokens, 64 out, concurrency 4)"
echo
echo "### prefix cache on"
run $BIN bench --model "$MODEL" --num-prompts 16 --concurrency 4 --prompt-len 576 \
  --shared-prefix-len 512 --gen-len 64
echo
echo "### prefix cache off"
run $BIN bench --model "$MODEL" --num-prompts 16 --concurrency 4 --prompt-len 576 \
  --shared-prefix-len 512 --gen-len 64 --no-prefix-caching

echo
echo "## int8 activation blocks (--int8-activations: opt-in, less exact; see README)"
run $BIN bench --model "$MODEL" --prompt-len 128 --gen-len 128 --batch 1,16 --int8-activations
online "1 16 64" --int8-activations

echo
echo "## f32 KV cache (--kv-cache-dtype f32; the default is f16)"
run $BIN bench --model "$MODEL" --prompt-len 128 --gen-len 128 --batch 1,16 --kv-cache-dtype f32
online "1 16" --kv-cache-dtype f32
online "1 16" --kv-cache-dtype f32 --int8-activations
