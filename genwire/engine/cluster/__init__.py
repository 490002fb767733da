"""The same run on a Ray cluster (SPEC §22): every guarantee of the local engine kept.

Owns the Ray engine, split by role: the driver (``driver``: ``RayBatches``; its helpers around
the workers in ``fleet``), the block workers (``worker``: ``BlockWorker``), what crosses between
them (``wire``: ``WorkerSpec``, ``Roster``, ``Drained``, ``RemoteError``), the one keeper of the
in-order gates (``keeper``), what the workers share — the budget, each model's brake, the
endpoints out (``shared``, with the budget's ``coordinator`` actor) — the rows handed out in
blocks (``block_rows``), a worker's batch slots (``batch_slots``), the drains that bring a
worker's paid answers to the driver as they settle (``drain``), the concurrency slots those
answers hold until the driver stored them (``holds``), and the Ray instance genwire
starts with the reaper that ends its processes (``instance``, ``reaper``). ``ray`` is imported only
by a run that uses this engine.

May import: ``engine.rows``, ``engine.money``, ``engine.report``, ``engine.gates``,
``engine.records`` and the layers below the engine; never ``engine.run``.

How it works
------------
The driver has already validated and wired the container (``run_pipeline``). While
its pre-flight runs, ``start`` joins (or starts, off the event loop) Ray, creates W worker
actors and has them boot their containers (``warm``): the seconds a worker process takes
to start overlap the probes instead of following them. Nothing is generated until the
pre-flight passed (``batches``); a run that ends before (a failed pre-flight) ends them
(``aclose``). Then it hands them blocks of rows ``[start, stop)`` and yields the blocks'
``BatchResult``s strictly in row order, so the ``OutputSink`` writes exactly what the
local engine writes.

* **Dispatch.** A worker gets its next block as soon as one of its blocks finishes,
  whatever the order (it never idles while an earlier block of another worker is still
  out); finished blocks wait for the earlier ones on the driver, at most
  ``BLOCKS_PER_WORKER + 1`` per worker. Blocks shrink towards the end (down to one batch)
  and go to the least loaded worker, so the workers finish together.
* **The roster.** What a worker learns only once the pre-flight passed (the other
  workers' handles, the pre-flight's endpoint verdicts, the budget's coordinator) is a
  ``Roster`` sent with every block, applied before the block's first request: a worker
  Ray restarts gets it again with the block it re-runs.

* **Workers boot their own container.** Each actor gets a pickled ``LoadedConfig``
  (never a client or a resource) plus the generator classes the driver wired, and builds
  its container with the same ``wire_columns``/``build_graph`` steps ``boot`` uses. The
  classes travel as references (importable modules), so a worker wires exactly what
  the driver wired — including classes given to ``genwire.boot(generators=...)`` —
  without re-scanning entry points. The container is booted lazily inside the actor's
  event loop (clients belong to a loop: ``warm``, called as soon as the actor is made)
  and closed by ``close()``, which the driver calls at the end, on failure and on
  cancellation, before killing the actor.
* **Same rows as the local engine.** A block runs ``BatchRunner.run(indices)`` on
  global row indices (a resumed run sends only the rows its checkpoint lacks), so
  every seeded generator (sampler, seed-dataset shuffle) draws the same values
  whichever worker runs a row.
* **Cluster-wide ``max_concurrency``.** Each provider's cap is *split* across workers:
  worker i gets ``cap // W`` slots plus one of the ``cap % W`` left over, and W is
  capped by the smallest cap among the providers the columns use, so every worker has
  at least one slot and the sum is exactly the configured cap. A shared limiter actor
  would adapt to uneven load but adds a round trip to the limiter per request and a
  single point of failure; splitting is exact and free, at the cost of idle slots when
  one worker has less to do than another (blocks are small and handed to the least
  loaded worker, which keeps that cost low).
* **Rate limits.** ``rate_limit`` is split the same way (each worker paces at 1/W of the
  requests and tokens per minute: the shares sum to the cluster's rate). A brake is the
  cluster's: when 429s persist on one worker, its gate tells every other worker
  (the ``Roster`` gives each the others' handles), which brakes that model of that
  endpoint too (``engine.cluster.shared``).
* **The budget** (``--max-cost``, ``pipeline.budget``) is held cluster-wide by a
  coordinator actor (``engine.cluster.shared``), made with the workers (its process boots
  beside theirs) and told what the pre-flight's probes spent (``Coordinator.begin``)
  before the first block: each worker's meter spends leases of the cap,
  the driver reads the coordinator after every block and takes no new rows once it is
  exhausted (or, as locally, while what is left would not finish them), and the run
  stops with exit 3.
* **Tools** (SPEC §18): each worker's container starts the stdio servers its columns
  use on first use, one per server per worker, under the launcher's reaper with its
  parent the worker process (declared variables only): a worker closed at the end stops
  them, a worker Ray kills (or the driver's death, which ends its actors) takes them
  with it. The pre-flight runs once, on the driver.
* **Pools** (SPEC §17): every worker routes, cools down and fails over on its own pools,
  starting from the driver's verdicts (the pre-flight's); a member a worker takes out
  (auth, not_found) is out on every worker (it tells the others, as a brake); the
  per-endpoint figures come back in the receipts and add up.
* **Quality gates** (SPEC §21): a gated run's ``CandidatePlan`` feeds the driver
  (``batches(feed=...)``): it counts the kept rows as blocks come back and stops
  scheduling at N. Stateless gates run on the workers; stateful ones (``in_order``) are
  judged for the whole cluster by one keeper actor, in index order (``engine.cluster.keeper``),
  made with the workers; it gets the roster (``BlockWorker.join``) before the first block.
* **Fault tolerance.** Actors have ``max_restarts`` and their tasks
  ``max_task_retries``: a worker process that dies mid-block is restarted (a new
  ``BlockWorker`` from the same ``WorkerSpec``, the roster from the re-run block) and the
  block re-run. A block's result is returned only when the whole block is done, so a retried
  block neither loses nor duplicates rows. Genuine errors (``PluginError``,
  ``UndeclaredResourceError``, ``RunError``...) are *returned* as a picklable record and
  re-raised on the driver as the same type, message and attributes: genwire's errors
  take other constructor arguments than they store, so Ray's own exception pickling
  would garble or fail to rebuild them, and application errors are never retried.
* **Bounded memory.** At most ``BLOCKS_PER_WORKER + 1`` blocks per worker are submitted
  and not yet yielded; a block is a few batches.
* **What workers need.** Plugins installed (their classes are imported, not copied)
  and dataset files at the same absolute paths on every node; each worker loads its own
  copy of any embedded (``local``) model. Container overrides live in the driver's
  process only, so a run with overrides is refused rather than silently using the real
  resource on the workers.
* **Accounting: the driver is its one writer.** Each worker meters its requests as the
  driver does and sends what it paid for with its rows: the last ``BatchResult`` of a
  block carries a ``Receipt`` (usage, ledger entries with their rows, per-second request
  figures, a pool's per-endpoint figures, each since its previous receipt), and closing a
  worker returns what a cancelled block paid. The driver feeds every receipt to the run's
  ``RunAccounts`` before the block's rows go to the checkpoint, so the ledger, the cost,
  the metrics, the report page and ``--json`` count the workers' requests as a local run
  counts its own.
* **A dead driver loses at most ``max_concurrency`` answers.** A worker's answer keeps
  its request's provider slot until the driver stored the drain that carried it (said by
  the next drain call), so paid-but-not-on-the-driver's-disk never exceeds the cap, by
  construction (``engine.cluster.holds``); a worker Ray restarts leases the budget as a new
  process (``Coordinator``), its predecessor's lease still counted.
* **Checkpoints.** Blocks come back to the driver in row order and go through the same
  ``OutputSink`` as the local engine's batches: the driver writes the checkpoint, and a
  resume sends the workers only the missing rows.
* **Response cache: the driver is its one writer.** Workers open the driver's cache
  directory (``WorkerSpec``) to read it only: on a cluster it must be a path every node
  sees (``cache.dir`` on a shared file system), where SQLite's locking is not to be
  trusted with concurrent writers. The answers a worker paid for travel back in each
  ``BatchResult`` (keys, bodies, tokens), and the driver stores them, before the rows go
  to the checkpoint, as the local engine does: when the run returns, every answer it
  paid for is in the cache, however loaded the machine (workers writing at once waited
  on each other's locks, and one that waited past ``WRITE_WAIT_S`` dropped the rest of
  its answers). Hits travel back in each ``BatchResult`` and in the workers' usage.
* **Ray's lifetime** (``engine.cluster.instance``). An existing Ray (``ray.is_initialized()``)
  is used as is and never shut down. Otherwise ``ray.init(address=...)`` (the
  ``ray_address`` given, else Ray's own ``RAY_ADDRESS``) joins that cluster or starts a
  local one (quietly, no dashboard), which is left running: starting Ray costs seconds, so
  a second run in the same process reuses it; at interpreter exit genwire shuts it down and
  a reaper process kills every process of it left (at once if genwire is killed). The
  actors of a run are always killed at the end of the run.
"""
