#!/usr/bin/env bash
# The GPU proof (testbed/gpu/prove.py; docs/nodeagent.md, "On a real GPU"), run from the
# repository root on a machine with an NVIDIA card: `bash testbed/gpu/prove.sh`, or
# `bash .gpuproof/prove.sh` from the git-ignored copy beside HAMi-core's source.
# Everything goes to $OUT (default ./gpu-proof-out): proof.log, results.json, nvidia-smi.txt,
# detect.json, build.log, workload.json. The whole run is capped at PROOF_TIMEOUT_S (420 s).
# HAMI_CORE_SOURCE: HAMi-core's source tree (default .gpuproof/hami-core); HAMI_CORE_LIBRARY: a
# libvgpu.so built elsewhere, staged instead; with neither, the testbed's stand-in is staged.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$PWD/gpu-proof-out}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
timeout --kill-after=10 "${PROOF_TIMEOUT_S:-420}" \
  python3 "$here/prove.py" --out "$out" --source "${HAMI_CORE_SOURCE:-.gpuproof/hami-core}" "$@" \
  2>&1 | tee "$out/proof.log"
status=${PIPESTATUS[0]}
echo "prove.py exit status: $status (0: every claim passed; 124: the run timed out)"
exit "$status"
