"""Layer 3: runs and their files, the subject every analysis takes, the study's training recipe (train,
batched), evaluation on the pools, the three phases and the run's outcome."""
