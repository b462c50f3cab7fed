"""Training: the one training path (run.py), its Trainer callbacks, TensorBoard logs, knowledge distillation, and
the job manager that runs training as subprocesses."""
