"""The sweep scheduler, one rule per module.

- run.py: begin a sweep, run what is left, finish it (``run_sweep``); the farm and Ray around it
  (``execute_sweep``), skipped when nothing is left.
- sweep.py: the event loop (``SweepRun``): what starts when, cancel, heartbeat, batching of cheap work.
- jobs.py: one ``JobState`` per job (attempts, boards failed on, leader/followers); equivalence.
- builds.py: the build queue: cache hits, program reuse, parking, rebuild.
- measurements.py: the measurement queue: slots per board key, the host fence, retries, quarantine.
- references.py: inputs and ONNX Runtime outputs per model and seed.
- goldens.py: the golden model of each target (health checks).
- events.py: listeners (store writes, progress counts) and ``SweepOutcome``.
- tasks.py: the one place a Builder or Runner is called (``build_on_node``, ``measure_on_node``).
- pool.py, ray_pool.py: the task-pool seam; ``InlinePool`` (in-process, tests) and ``RayPool``.
"""
