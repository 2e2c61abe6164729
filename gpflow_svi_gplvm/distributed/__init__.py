"""Several workers: the cluster's start-up, this worker's place and the collectives between
workers, the variables a worker owns, and the step's sums over replicas."""
