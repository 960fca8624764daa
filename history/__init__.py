"""history: metrics ingestion, validation/quarantine, the Parquet store, the Spark pipeline.

Public entry points (see ``docs/history.md``):

* ``history.ingest.ingest(paths, fmt, store, AdapterOptions(...)) -> IngestReport``
* ``history.store.MetricStore(path)``: ``raw()``, ``quarantine()``, ``operator_windows()``,
  ``edge_windows()``, ``source_rates()``, ``table(name, job)``, ``raw_files()``, ``summary()``
* ``history.summarize.summarize_store(store, window_s=None, master="local[2]", full=False) -> SummaryReport``
  (incremental after the first run: only the windows touched since)
* ``history.pipeline.summarize(raw_df, window_s) -> Summary`` (pure Spark DataFrame functions)
* ``history.spark.spark_session(master="local[2]", app_name="augury", driver_memory=None)``
* ``history.schema``: ``Metric``, ``Reason``, ``RAW_SCHEMA`` and the table schemas
"""
