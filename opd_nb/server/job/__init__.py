"""A fine-tune job's life on the server: the queue that runs its worker, how its end is recorded, its answers, its files."""
