#!/usr/bin/env bash
# What a lent GPU machine runs first, in at most about 5 minutes: the B-SVI training step on the
# GPU and on the CPU side by side (oil flow, MNIST and single-cell shapes; float64 and float32),
# then one full training run on the GPU with its reconstruction error. --smoke: tiny sizes, what
# CI runs on its CPU. PYTHON: the interpreter (default: python). See benchmarks/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
"${PYTHON:-python}" -c 'import tensorflow as tf; print("TensorFlow", tf.__version__, "sees", tf.config.list_physical_devices())'
exec "${PYTHON:-python}" benchmarks/gpu_check.py "$@"
