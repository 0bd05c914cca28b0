"""What runs in a Spark task: a stage of one subtask for one epoch (``task``), its operator chain,
contexts, exits, cached operator instances, timers and the state I/O between backends and files."""
