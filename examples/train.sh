#!/bin/bash
#NANUM --gpus 2 --time 4h --mem 32G --cpus 8
#NANUM --lab vision --name resnet50 --priority 10
#NANUM --env WANDB_MODE=offline --env SEED=1
#NANUM --no-preempt
python train.py --epochs 90
