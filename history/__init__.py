"""history: metrics ingestion, validation/quarantine, the Parquet store, the Spark pipeline."""
