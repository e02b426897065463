#!/bin/sh
# cuda-mma-profile: Nsight Compute's view of the tensor-core matmul on one
# Qwen3-8B matrix at a few widths (default: down at 8 and 9 rows, the step
# the verify cost curve takes from 8 to 9 rows), from an unpacked
# scripts/cuda-pack archive on the GPU machine: throughput against the
# memory and L2 ceilings, occupancy, the instructions issued and where the
# warps stall. One launch per width is profiled (after three warm-up
# launches), so a run takes about a minute. The clocks are left as they
# run (ncu would lock them to base, 1.36 GHz here, which slows what the
# SMs do by a third and not the memory).
#   bench/cuda-mma-profile.sh DIR [MATRIX=down] [ROWS="8 9"]
set -e
D=$(cd "${1:?usage: bench/cuda-mma-profile.sh DIR [MATRIX] [ROWS]}" && pwd)
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
for m in ${3:-8 9}; do
    echo "## ${2:-down}, $m rows"
    "$NCU" --clock-control none --kernel-name regex:k_mma --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section LaunchStats --section WarpStateStats --section InstructionStats \
        --section ComputeWorkloadAnalysis --section SchedulerStats \
        "$D/cuda-ops-bench" 4 one "${2:-down}" "$m"
done
