"""What a released notebook imports: the student runtime, and the only part of `grader` in the
student kit. It never imports `grader.authoring` or `grader.grading` (tests/test_layers.py).

The public surface, by module (`from grader.runtime import device, checks, ...`):

| module | for |
|---|---|
| `device` | `setup()` first, before `import triton`: GPU or Triton's interpreter; sizes per mode |
| `checks` | correctness on fresh inputs, with messages that say what to fix |
| `timing` | `bench(fn)`: one timing method (CUDA events, L2 flushed, median and spread) |
| `perf` | speed graded as ratios against baselines timed in the same run |
| `roofline` | the device's measured ceilings, arithmetic intensity, the roofline plot |
| `plots` | the plots of the reader's measurements: one call per plot, matplotlib inside |
| `results` | the figures a notebook measured, kept for later notebooks' plots |
| `integrity` | the graded call launches the student's kernel; timing in a separate process |
| `profile` | a kernel's hardware counters, read by Nsight Compute (`ncu`) in a child process |
| `launches` | the exercise's own kernel did the work: launched on the inputs, wrote the output |
| `gpu_compile` | in interpreter mode, each graded launch also compiled for the GPU (sm_80, sm_90) |
| `verify` | the audit of a candidate kernel against a reference (08) |
| `attention` | attention's reference, baselines and cases (07, 08) |
| `llm` | an optional call to an OpenAI-compatible endpoint (08) |
| `doctor` | the device and version report (`python -m grader.runtime`) |
| `widgets` | the notebooks' explorers (roofline, online softmax, autotuning) |

`stubs` recognises an untouched exercise stub for `checks`; `compile_helper` is the process in
which `gpu_compile` runs Triton's compiler. Importing this package is light:
torch and triton are imported by the modules that need them, and triton only after
`device.setup()`."""
