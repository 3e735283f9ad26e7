#!/bin/bash
# One-factor screens of the Eq. 6 TARNN (one eta per Euler step, shared over time) on the toy task, around
# reproduce/toy-tarnn (2 units, K 5, reading paper, gate inside, relu, eta_0 0.01 as exp, b_beta -3, Adam 1e-2,
# batch 128, 5 epochs = 1,955 steps). Usage: grid.sh SEEDS LABEL... (labels below); rows to results/screen.jsonl.
cd "$(dirname "$0")/../.."
seeds=$1; shift
spec() {
  case $1 in
    base)      echo "" ;;
    ep20)      echo "train.epochs=20 train.eval_every=400" ;;
    eta0.1)    echo "model.options.eta=0.1" ;;
    eta0.5)    echo "model.options.eta=0.5" ;;
    eta1)      echo "model.options.eta=1.0" ;;
    eta1_bb0)  echo "model.options.eta=1.0 --beta-bias 0" ;;
    eta1_ep20) echo "model.options.eta=1.0 train.epochs=20 train.eval_every=400" ;;
    bb0_eta0.1) echo "model.options.eta=0.1 --beta-bias 0" ;;
    bb0_eta0.1_ep30) echo "model.options.eta=0.1 train.epochs=30 train.eval_every=1000 --beta-bias 0" ;;
    bb0_eta0.1_ep15_lr3e-3) echo "model.options.eta=0.1 train.epochs=15 train.eval_every=500 optim.lr=0.003 --beta-bias 0" ;;
    bb0_eta0.1_ep15) echo "model.options.eta=0.1 train.epochs=15 train.eval_every=500 --beta-bias 0" ;;
    bb0)       echo "--beta-bias 0" ;;
    bb3)       echo "--beta-bias 3" ;;
    K3)        echo "model.options.K=3" ;;
    K10)       echo "model.options.K=10" ;;
    outside)   echo "model.options.gate=outside" ;;
    tanh)      echo "model.options.activation=tanh" ;;
    sigmoid)   echo "model.options.activation=sigmoid" ;;
    lr3e-3)    echo "optim.lr=0.003" ;;
    lr3e-2)    echo "optim.lr=0.03" ;;
    *)         echo "$2" ;;
  esac
}
for label in "$@"; do
  args=$(spec ${label%%=*} "${label#*=}")
  nice -n 19 .venv/bin/python lab/2026-11-29-tarnn-toy-single-eta/screen.py \
    lab/2026-11-29-tarnn-toy-single-eta/results/screen.jsonl ${label%%=*} $args --seeds $seeds
done
