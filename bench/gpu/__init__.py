"""The sections of bench/gpu_check.py (issue 33), one module each; run them through that script:

    bash bench/gpu_check.sh --prepare                 # here, on the CPU: the bundle the GPU machine reads
    bash bench/gpu_check.sh OUT_DIR                   # on the GPU machine: every section, <= 6 min on an H100
    bash bench/gpu_check.sh OUT_DIR --device cpu      # the rehearsal: every section at a tiny size on the CPU

| module | section |
| --- | --- |
| `env` | what the sections share: the run's context, the `gpt1` children's commands and environment, records |
| `bundle` | `--prepare`: the CPU stages' outputs, the wheels the GPU machine lacks, the tasks' token lengths |
| `hardware` | a. GPU, driver, torch; measured bf16 matmul peak and copy bandwidth |
| `speed` | b. bench/train_step.py at the paper's shape: ours eager and compiled against HF, MFU, profile |
| `stages` | c. every CUDA path of the stages through the real CLI, killed and resumed, outputs verified |
| `precision` | d. CPU fp32 against GPU fp32, TF32 and bf16; two identical GPU pre-trainings |
| `finetune_speed` | e. fine-tuning update time at the gpu profile's shapes; bench/gpu_budget.py from measured speeds |
| `report` | results.json, report.md and the final table, rewritten after every section |
"""
