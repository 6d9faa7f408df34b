#!/bin/bash
# one finetune job per line of jobs.txt, two at a time, one thread each
cd /work/main
run() { t=$1; v=$2; s=$3; m=gpt; [ $v = lstm ] && m=lstm
  GPT1_DATA_MIRROR=../shared/data OMP_NUM_THREADS=1 TQDM_DISABLE=1 MLFLOW_TRACKING_URI=sqlite:////tmp/s4/mlflow.db \
  .venv/bin/gpt1 finetune --profile default --task $t --variant $v --seed $s --pretrained results/default/pretrain/$m \
  --tokenizer results/default/tokenizer --examples results/default/tasks/$t --out /tmp/s4/results/default/finetune/$t/$v/$s \
  --workers 1 > /tmp/s4/log-$t-$v-$s.txt 2>&1; echo "$t $v $s rc=$?" >> /tmp/s4/done.txt; }
export -f run
date +%T > /tmp/s4/start
xargs -P 2 -L 1 bash -c 'run $0 $1 $2' < /tmp/s4/jobs.txt
date +%T > /tmp/s4/end
