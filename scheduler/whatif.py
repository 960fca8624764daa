"""What-if capacity planning: sweep input rates and configurations through the vectorized model.

Units: rates in tuples/s, latencies in ms.

The sweep functions are functions over values (a compiled model, an array of rates, a
``ConfigSpace``) returning pandas DataFrames and write no files; ``TableWriter`` streams the chunks
into a CSV/Parquet file (what ``augury whatif`` and ``experiments/bench/bench_whatif.py`` do). The
sweep is the cartesian product
*configurations x rates*, enumerated configuration-major: row ``r`` is configuration
``r // len(rates)`` at rate ``rates[r % len(rates)]``, so it can be cut into chunks of bounded size
(``iter_predictions``) or distributed over Spark (``spark_predictions``: the configurations as a
DataFrame partitioned across executors, ``mapInPandas`` compiling the model once per partition).
Both paths produce the same rows.

The prediction table (``table_schema(names)``: column -> type, the one definition the CSV/Parquet
writer, the Spark schema and ``table_columns`` derive from): ``config_id``, ``p_<operator>`` for every operator (in
the model's topological order), ``instances`` (total over all operators), ``rate``,
``throughput``, ``max_rate`` (the highest rate the configuration sustains), ``bottleneck`` (the
operator whose hottest instance saturates first; None when nothing has a capacity),
``max_utilization`` (the hottest instance over all operators), ``saturated``,
``latency_mean_ms``, ``latency_p95_ms``, ``latency_p99_ms`` (NaN when saturated).

Derived tables: ``config_table`` (one row per configuration: its max sustainable rate) and
``cheapest_per_rate`` (per rate, the configuration with the fewest instances whose hottest
instance is at or below the utilization target, that is not saturated and, with an SLO, whose
latency statistic is within it; ties by the lower statistic, then the lower config id). Both are
mergeable over chunks (``CheapestPerRate``), so they stream like the table.

Configurations come from ``--sweep op=1..16`` flags (``parse_sweep``; several flags form a
cartesian product, the first flag varying slowest; operators not swept keep the model's
parallelism; sweeping an operator tied to others by forward edges sets the whole group) or from a
file (``read_configs``: CSV/Parquet with one column per operator, or a JSON list of
``{op: p}``; operators left out keep the model's parallelism).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from modeler.errors import ConfigError
from modeler.limits import MAX_RATES, MAX_SWEEP_VALUES
from modeler.modelfile import JobModel
from modeler.queueing import LATENCY_STATS, CompiledModel, compile_model, predict_batch
from scheduler.errors import SchedulerError
from scheduler.targets import Targets

#: Columns of the prediction table after ``config_id`` and the ``p_<operator>`` columns, with their
#: types (``int``, ``float``, ``str``, ``bool``): the one definition of the table's schema.
VALUE_TYPES: Mapping[str, str] = {
    "instances": "int", "rate": "float", "throughput": "float", "max_rate": "float", "bottleneck": "str",
    "max_utilization": "float", "saturated": "bool", "latency_mean_ms": "float", "latency_p95_ms": "float",
    "latency_p99_ms": "float",
}
#: Column names of ``VALUE_TYPES``, in order.
VALUE_COLUMNS = tuple(VALUE_TYPES)
#: Value columns that are never null (the rest are null/NaN when nothing has a capacity or the
#: configuration saturates).
_NOT_NULL = ("instances", "rate")
#: Columns of the per-configuration table after ``config_id`` and the ``p_<operator>`` columns.
CONFIG_VALUE_COLUMNS = ("instances", "max_rate", "bottleneck")
#: Default cap on the number of configurations a sweep may enumerate.
MAX_CONFIGURATIONS = 10_000_000


def p_column(operator: str) -> str:
    """The table column holding ``operator``'s parallelism."""
    return f"p_{operator}"


def table_schema(names: Sequence[str]) -> dict[str, str]:
    """The prediction table's columns (``config_id``, ``p_<operator>`` per operator in ``names``
    order, then ``VALUE_COLUMNS``) -> type (``int``, ``float``, ``str``, ``bool``)."""
    return {"config_id": "int", **{p_column(n): "int" for n in names}, **VALUE_TYPES}


def config_schema(names: Sequence[str]) -> dict[str, str]:
    """The per-configuration table's columns (``config_table``) -> type."""
    full = table_schema(names)
    keep = ["config_id", *(p_column(n) for n in names), *CONFIG_VALUE_COLUMNS]
    return {c: full[c] for c in keep}


def table_columns(names: Sequence[str]) -> list[str]:
    return list(table_schema(names))


# ------------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class Sweep:
    """One ``--sweep op=values`` flag: the parallelisms to try for ``operator``."""

    operator: str
    values: tuple[int, ...]
    text: str = ""
    """The flag's text, for error messages."""


_INT = re.compile(r"^\s*\d+\s*$")
_RANGE = re.compile(r"^\s*(\d+)\s*\.\.\s*(\d+)\s*(?::\s*(\d+)\s*)?$")


def parse_sweep(text: str, flag: str = "--sweep") -> Sweep:
    """``op=1..16``, ``op=1..16:2`` (step 2), ``op=1,2,4,8``, ``op=4``, or items mixed with commas
    (``op=1..4,8,16``). Values keep their first-seen order; duplicates are dropped."""
    name, sep, spec = str(text).partition("=")
    if not sep or not name.strip():
        raise SchedulerError("expected op=1..16, op=1..16:2 or op=1,2,4,8", field=flag, value=text)
    if not spec.strip():
        raise SchedulerError("no parallelism values after '='", field=flag, value=text)
    values: list[int] = []
    for item in spec.split(","):
        if _INT.match(item):
            values.append(int(item))
            continue
        match = _RANGE.match(item)
        if not match:
            raise SchedulerError(f"bad item {item.strip()!r}: expected N, A..B or A..B:STEP (integers)",
                                 field=flag, value=text)
        lo, hi, step = int(match.group(1)), int(match.group(2)), int(match.group(3) or 1)
        if lo > hi:
            raise SchedulerError(f"empty range {item.strip()!r} (start > end)", field=flag, value=text)
        if step < 1:
            raise SchedulerError(f"range step must be >= 1 in {item.strip()!r}", field=flag, value=text)
        if len(values) + (hi - lo) // step + 1 > MAX_SWEEP_VALUES:  # counted before it is built
            raise SchedulerError(f"more than {MAX_SWEEP_VALUES:,} values (the documented limit)",
                                 field=flag, value=text)
        values.extend(range(lo, hi + 1, step))
    if any(v < 1 for v in values):
        raise SchedulerError("parallelism must be >= 1", field=flag, value=text)
    return Sweep(operator=name.strip(), values=tuple(dict.fromkeys(values)), text=str(text))


def parse_rates(text: str, flag: str = "--rates") -> np.ndarray:
    """``a:b:n`` -> ``n`` evenly spaced rates from ``a`` to ``b`` (inclusive), tuples/s; a single
    number ``R`` is the one rate R."""
    parts = str(text).split(":")
    if len(parts) not in (1, 3):
        raise SchedulerError("expected START:STOP:COUNT (e.g. 1000:20000:20) or one rate",
                             field=flag, value=text)
    try:
        lo = float(parts[0])
        hi = float(parts[1]) if len(parts) == 3 else lo
    except ValueError:
        raise SchedulerError("rates must be numbers", field=flag, value=text) from None
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or hi < 0:
        raise SchedulerError("rates must be finite and >= 0", field=flag, value=text)
    count = 1
    if len(parts) == 3:
        if not _INT.match(parts[2]) or int(parts[2]) < 1:
            raise SchedulerError("COUNT must be an integer >= 1", field=flag, value=text)
        count = int(parts[2])
        if count > MAX_RATES:
            raise SchedulerError(f"COUNT must be <= {MAX_RATES:,} (the documented limit)", field=flag,
                                 value=text)
    if hi < lo:
        raise SchedulerError("STOP must be >= START", field=flag, value=text)
    if count == 1 and hi != lo:
        raise SchedulerError("COUNT 1 needs START == STOP", field=flag, value=text)
    if count > 1 and hi == lo:
        raise SchedulerError("START == STOP gives one rate: use COUNT 1", field=flag, value=text)
    return np.linspace(lo, hi, count)


# ------------------------------------------------------------------ configuration space


@dataclass(frozen=True)
class Axis:
    """One swept dimension: the operator columns set together (a forward group) and the values."""

    columns: tuple[int, ...]
    values: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class ConfigSpace:
    """The configurations of a sweep, enumerated lazily by id (``block``).

    Either a cartesian product of ``axes`` over ``base`` (the model's parallelism), or an
    ``explicit`` matrix [C, V] (columns in ``names`` order).
    """

    names: tuple[str, ...]
    base: tuple[int, ...]
    axes: tuple[Axis, ...] = ()
    explicit: np.ndarray | None = field(default=None, repr=False)
    varying: tuple[str, ...] = ()
    """Operators whose parallelism differs between configurations (used for labels)."""

    @property
    def size(self) -> int:
        if self.explicit is not None:
            return int(self.explicit.shape[0])
        return int(np.prod([len(a.values) for a in self.axes], dtype=np.int64)) if self.axes else 1

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    def strides(self) -> tuple[int, ...]:
        """Index of axis k in config id c is ``(c // strides[k]) % len(axes[k].values)``."""
        shape = self.shape
        return tuple(int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape)))

    def block(self, ids: np.ndarray) -> np.ndarray:
        """Parallelism matrix [len(ids), V] of configurations ``ids``."""
        ids = np.asarray(ids, dtype=np.int64)
        if self.explicit is not None:
            return self.explicit[ids]
        P = np.tile(np.asarray(self.base, dtype=np.int64), (len(ids), 1))
        for axis, stride in zip(self.axes, self.strides()):
            idx = (ids // stride) % len(axis.values)
            vals = np.asarray(axis.values, dtype=np.int64)[idx]
            for c in axis.columns:
                P[:, c] = vals
        return P

    def label(self, row: Sequence[int]) -> str:
        """``op=p,...`` over the varying operators (all operators when none varies)."""
        shown = self.varying or self.names
        return ",".join(f"{n}={int(row[self.names.index(n)])}" for n in shown)

    def configs(self, ids: np.ndarray) -> list[dict[str, int]]:
        return [{n: int(p) for n, p in zip(self.names, row)} for row in self.block(ids)]


def _forward_group(compiled: CompiledModel, column: int) -> tuple[int, ...]:
    for group in compiled.forward_groups:
        if column in group:
            return tuple(group)
    return (column,)


def sweep_space(compiled: CompiledModel, sweeps: Sequence[Sweep], *, flag: str = "--sweep",
                max_configurations: int = MAX_CONFIGURATIONS) -> ConfigSpace:
    """The cartesian product of ``sweeps`` over the model's parallelism (no sweep: the model's
    own configuration). Raises ``SchedulerError`` naming ``flag`` for an unknown operator, an
    operator swept twice (or twice through its forward group), a value outside the operator's
    [min, max], or more than ``max_configurations`` configurations."""
    base = tuple(int(p) for p in compiled.config_array([{}])[0])
    axes: list[Axis] = []
    used: dict[int, str] = {}
    for sweep in sweeps:
        if sweep.operator not in compiled.index:
            raise SchedulerError(f"unknown operator {sweep.operator!r} (known: {', '.join(compiled.names)})",
                                 field=flag, value=sweep.text or sweep.operator)
        columns = _forward_group(compiled, compiled.index[sweep.operator])
        for c in columns:
            if c in used:
                tied = "" if compiled.names[c] == sweep.operator else f" (tied to {compiled.names[c]} by forward edges)"
                raise SchedulerError(f"operator {sweep.operator!r} is swept twice{tied}",
                                     field=flag, value=sweep.text or sweep.operator)
        for c in columns:
            lo, hi = int(compiled.min_p[c]), int(compiled.max_p[c])
            bad = [v for v in sweep.values if not lo <= v <= hi]
            if bad:
                raise SchedulerError(f"{compiled.names[c]}: parallelism {bad[0]} outside [{lo}, {hi}]",
                                     field=flag, value=sweep.text or sweep.operator)
            used[c] = sweep.operator
        axes.append(Axis(columns=columns, values=tuple(sweep.values)))
    size = int(np.prod([len(a.values) for a in axes], dtype=np.float64)) if axes else 1
    if size > max_configurations:
        raise SchedulerError(f"the sweep has {size:,} configurations (more than {max_configurations:,})",
                             field=flag, value=" ".join(s.text for s in sweeps))
    varying = tuple(compiled.names[c] for a in axes if len(a.values) > 1 for c in a.columns)
    return ConfigSpace(names=compiled.names, base=base, axes=tuple(axes), varying=varying)


def configs_space(compiled: CompiledModel, configs: Sequence[Mapping[str, int]], *,
                  file: str | None = None, flag: str = "--configs") -> ConfigSpace:
    """An explicit list of (possibly partial) configurations, each validated against the model."""
    if not configs:
        raise SchedulerError("no configurations", file=file, field=flag)
    rows = []
    for i, config in enumerate(configs):
        try:
            rows.append(compiled.config_array([config])[0])
        except ConfigError as err:
            where = file if file is not None else flag
            raise SchedulerError(f"configuration {i} of {where}: {err.message}", file=file,
                                 field=err.field, value=err.value) from None
    P = np.asarray(rows, dtype=np.int64)
    varying = tuple(n for j, n in enumerate(compiled.names) if len(np.unique(P[:, j])) > 1)
    base = tuple(int(p) for p in compiled.config_array([{}])[0])
    return ConfigSpace(names=compiled.names, base=base, explicit=P, varying=varying)


def read_configs(path: str | Path, compiled: CompiledModel, flag: str = "--configs") -> ConfigSpace:
    """Configurations from a file: CSV or Parquet with one column per operator (named ``op`` or
    ``p_op``; an optional ``config_id`` column is ignored; empty cells keep the model's
    parallelism), or JSON: a list of ``{op: p}`` objects."""
    path = Path(path)
    if not path.is_file():
        raise SchedulerError("no such file", field=flag, value=str(path))
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            from modeler.documents import read_document

            data = read_document(path, "json", "configurations file", SchedulerError, flag)
            if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
                raise SchedulerError("expected a JSON list of {operator: parallelism} objects",
                                     file=str(path), field=flag)
            configs = [{str(k): _as_int(v, str(path), f"[{i}].{k}") for k, v in d.items()}
                       for i, d in enumerate(data)]
        elif suffix in (".csv", ".parquet"):
            frame = pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path)
            configs = _frame_configs(frame, compiled, str(path))
        else:
            raise SchedulerError("expected a .csv, .parquet or .json file", field=flag, value=str(path))
    except (ValueError, OSError, pd.errors.ParserError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SchedulerError(f"cannot read the configurations ({first})", file=str(path), field=flag) from None
    return configs_space(compiled, configs, file=str(path), flag=flag)


def _as_int(value, file: str, field_name: str) -> int:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)  # any size: the range is checked against the model (configs_space)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise SchedulerError("parallelism must be an integer", file=file, field=field_name, value=value)


def _frame_configs(frame: pd.DataFrame, compiled: CompiledModel, file: str) -> list[dict[str, int]]:
    columns: dict[str, str] = {}
    for col in frame.columns:
        name = str(col)
        if name == "config_id":
            continue
        op = name if name in compiled.index else (name[2:] if name.startswith("p_") and name[2:] in compiled.index else None)
        if op is None:
            raise SchedulerError(f"unknown operator column (known: {', '.join(compiled.names)})",
                                 file=file, field="columns", value=name)
        columns[name] = op
    if not columns:
        raise SchedulerError("no operator columns", file=file, field="columns")
    configs = []
    for i, row in enumerate(frame[list(columns)].itertuples(index=False)):
        config = {}
        for col, value in zip(columns, row):
            if value is None or (isinstance(value, float) and math.isnan(value)):
                continue
            config[columns[col]] = _as_int(value, file, f"row {i}.{col}")
        configs.append(config)
    return configs


# ---------------------------------------------------------------------- prediction


def predict_rows(compiled: CompiledModel, space: ConfigSpace, rates: np.ndarray,
                 start: int, stop: int) -> pd.DataFrame:
    """Rows ``start..stop-1`` of the sweep (configuration-major) as a prediction table."""
    rates = np.asarray(rates, dtype=float)
    m = len(rates)
    rows = np.arange(start, stop, dtype=np.int64)
    cfg = rows // m
    first = int(cfg[0]) if len(cfg) else 0
    unique = np.arange(first, int(cfg[-1]) + 1 if len(cfg) else first, dtype=np.int64)
    P = space.block(unique)[cfg - first]
    return _table(compiled, cfg, P, rates[rows % m])


def _table(compiled: CompiledModel, config_id: np.ndarray, P: np.ndarray, rate: np.ndarray) -> pd.DataFrame:
    """The prediction table of configurations ``P`` [n, V] at ``rate`` [n] (one pass of the model)."""
    names = compiled.names
    n = len(rate)
    P = np.asarray(P, dtype=np.int64).reshape(n, len(names))
    data: dict[str, np.ndarray] = {"config_id": np.asarray(config_id, dtype=np.int64)}
    for j, name in enumerate(names):
        data[p_column(name)] = P[:, j]
    data["instances"] = P.sum(axis=1)
    data["rate"] = np.asarray(rate, dtype=float)
    if n == 0:
        empty = {"bottleneck": object, "saturated": bool}
        data.update({c: np.array([], dtype=empty.get(c, float)) for c in VALUE_COLUMNS[2:]})
        return pd.DataFrame(data)
    batch = predict_batch(compiled, P, rate)
    data["throughput"] = batch.throughput
    data["max_rate"] = batch.max_rate
    labels = np.array([*names, None], dtype=object)
    data["bottleneck"] = labels[batch.bottleneck]  # -1 (no capacity anywhere) -> None
    data["max_utilization"] = batch.max_utilization.max(axis=1)
    data["saturated"] = batch.saturated.astype(bool)
    data["latency_mean_ms"] = batch.latency_mean_ms
    data["latency_p95_ms"] = batch.latency_p95_ms
    data["latency_p99_ms"] = batch.latency_p99_ms
    return pd.DataFrame(data)


def sweep_rows(space: ConfigSpace, rates: Sequence[float]) -> int:
    return space.size * len(rates)


def iter_predictions(compiled: CompiledModel, space: ConfigSpace, rates: np.ndarray, *,
                     chunk_rows: int = 50_000) -> Iterator[pd.DataFrame]:
    """The whole sweep as prediction tables of at most ``chunk_rows`` rows, in row order."""
    total = sweep_rows(space, rates)
    chunk_rows = max(1, int(chunk_rows))
    for start in range(0, total, chunk_rows):
        yield predict_rows(compiled, space, rates, start, min(total, start + chunk_rows))


def predict_sweep(compiled: CompiledModel, space: ConfigSpace, rates: np.ndarray) -> pd.DataFrame:
    """The whole sweep as one table (small sweeps; large ones should use ``iter_predictions``)."""
    return predict_rows(compiled, space, rates, 0, sweep_rows(space, rates))


# ------------------------------------------------------------------- derived tables


def config_table(table: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: ``config_id``, ``p_*``, ``instances``, ``max_rate``,
    ``bottleneck`` (the max sustainable rate does not depend on the input rate)."""
    pcols = [c for c in table.columns if c.startswith("p_")]
    out = table.drop_duplicates("config_id", keep="first")
    return out[["config_id", *pcols, *CONFIG_VALUE_COLUMNS]].reset_index(drop=True)


def _best(candidates: pd.DataFrame, targets: Targets) -> pd.DataFrame:
    """Per rate, the first row by (instances, latency statistic, config_id)."""
    ordered = candidates.sort_values(["rate", "instances", targets.latency_column, "config_id"],
                                     kind="mergesort", na_position="last")
    return ordered.drop_duplicates("rate", keep="first")


class CheapestPerRate:
    """Streaming ``cheapest_per_rate``: ``update`` with each chunk, then ``result(rates)``.

    The choice is a minimum under a total order, so the minimum of the chunks' minima is the
    minimum of the whole table whatever the chunking.
    """

    def __init__(self, targets: Targets = Targets()) -> None:
        self.targets = targets
        self._best: pd.DataFrame | None = None

    def update(self, chunk: pd.DataFrame) -> "CheapestPerRate":
        feasible = chunk[self.targets.meets(chunk)]
        if len(feasible):
            parts = [feasible] if self._best is None else [self._best, feasible]
            self._best = _best(pd.concat(parts, ignore_index=True), self.targets)
        elif self._best is None:
            self._best = chunk.iloc[:0]
        return self

    def result(self, rates: Sequence[float]) -> pd.DataFrame:
        """One row per rate in ``rates``: ``rate``, ``feasible`` and the chosen row's columns
        (nullable integers and NaN where no configuration meets the targets)."""
        rates = pd.Index(np.asarray(rates, dtype=float), name="rate")
        best = self._best if self._best is not None else pd.DataFrame(columns=["rate"])
        out = best.set_index("rate").reindex(rates)
        out.insert(0, "feasible", out["config_id"].notna() if "config_id" in out else False)
        for col in out.columns:
            if col == "config_id" or col.startswith("p_") or col == "instances":
                out[col] = out[col].astype("Int64")
            elif col == "saturated":
                out[col] = out[col].astype("boolean")
        return out.reset_index()


def cheapest_per_rate(table: pd.DataFrame, targets: Targets = Targets(),
                      rates: Sequence[float] | None = None) -> pd.DataFrame:
    """Per rate, the configuration with the fewest instances meeting ``targets`` (see module
    docstring); rates where none does have ``feasible`` False."""
    if rates is None:
        rates = np.unique(table["rate"].to_numpy())
    return CheapestPerRate(targets).update(table).result(rates)


# ------------------------------------------------------------------------- writing


def side_path(out: Path, name: str) -> Path:
    """``out``'s companion table ``<stem>.<name><suffix>`` (``t.csv`` -> ``t.max_rate.csv``)."""
    return out.with_name(f"{out.stem}.{name}{out.suffix}")


class TableWriter:
    """Appends chunks to a CSV or Parquet file (written to ``<out>.partial``, renamed on
    ``close``), so a table of any size is written with one chunk in memory and ``path`` only ever
    holds a whole table. ``columns``: name -> ``int``, ``float``, ``str`` or ``bool`` (the Parquet
    schema; ``table_schema``/``config_schema``)."""

    def __init__(self, path: Path, columns: Mapping[str, str]) -> None:
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.kind = self.path.suffix.lower().lstrip(".")
        self.columns = dict(columns)
        self._writer = None
        self._schema = None
        self._header = True
        self.rows = 0

    def _arrow_schema(self):
        import pyarrow as pa

        types = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_()}
        return pa.schema([pa.field(n, types[t]) for n, t in self.columns.items()])

    def write(self, chunk: pd.DataFrame) -> None:
        chunk = chunk[list(self.columns)]
        if self.rows == 0:  # the first chunk: create the directory (checked writable before the work)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.kind == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            if self._writer is None:
                self._schema = self._arrow_schema()
                self._writer = pq.ParquetWriter(self.partial, self._schema)
            self._writer.write_table(pa.Table.from_pandas(chunk, schema=self._schema, preserve_index=False))
        else:
            chunk.to_csv(self.partial, mode="w" if self._header else "a", header=self._header, index=False)
            self._header = False
        self.rows += len(chunk)

    def close(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.kind == "parquet":
            if self._writer is None:
                import pyarrow.parquet as pq

                self._schema = self._arrow_schema()
                self._writer = pq.ParquetWriter(self.partial, self._schema)
            self._writer.close()
        elif self._header:
            pd.DataFrame(columns=list(self.columns)).to_csv(self.partial, index=False)
        os.replace(self.partial, self.path)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self.partial.unlink(missing_ok=True)


def write_frame(frame: pd.DataFrame, path: Path) -> None:
    """``frame`` as CSV or Parquet (by ``path``'s suffix), written atomically."""
    from history.files import atomic_path

    path = Path(path)
    with atomic_path(path, "--out") as tmp:  # a failure leaves the previous file as it was
        if path.suffix.lower() == ".parquet":
            frame.to_parquet(tmp, index=False)
        else:
            frame.to_csv(tmp, index=False)


# ----------------------------------------------------------------------- Spark


def spark_schema(names: Sequence[str]):
    """The prediction table's Spark schema (from ``table_schema``)."""
    from pyspark.sql import types as T

    types = {"int": T.LongType(), "float": T.DoubleType(), "str": T.StringType(), "bool": T.BooleanType()}
    nullable = set(VALUE_COLUMNS) - set(_NOT_NULL)
    return T.StructType([T.StructField(c, types[t], c in nullable) for c, t in table_schema(names).items()])


def spark_configs(spark, space: ConfigSpace, start: int = 0, stop: int | None = None,
                  partitions: int | None = None):
    """Configurations ``start..stop-1`` as a Spark DataFrame (``config_id``, ``p_*``) in
    ``partitions`` partitions. A product sweep is generated on the executors from the ids (no
    configuration crosses the driver); an explicit list is shipped from the driver."""
    from pyspark.sql import functions as F

    stop = space.size if stop is None else stop
    partitions = partitions or max(1, spark.sparkContext.defaultParallelism)
    if space.explicit is not None:
        ids = np.arange(start, stop, dtype=np.int64)
        frame = pd.DataFrame({"config_id": ids})
        for j, n in enumerate(space.names):
            frame[p_column(n)] = space.explicit[ids, j]
        # Arrow slices the frame into consecutive partitions, in order.
        return spark.createDataFrame(frame)
    df = spark.range(start, stop, numPartitions=partitions).withColumnRenamed("id", "config_id")
    columns = {n: F.lit(int(b)).cast("long") for n, b in zip(space.names, space.base)}
    for axis, stride in zip(space.axes, space.strides()):
        index = F.expr(f"pmod(config_id div {stride}, {len(axis.values)})")
        value = F.element_at(F.array(*[F.lit(int(v)) for v in axis.values]), (index + 1).cast("int")).cast("long")
        for c in axis.columns:
            columns[space.names[c]] = value
    return df.select("config_id", *[columns[n].alias(p_column(n)) for n in space.names])


def _partition_predictor(model: JobModel, names: tuple[str, ...], rates: np.ndarray, chunk_rows: int):
    def predict_partition(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        compiled = compile_model(model)  # once per partition
        if compiled.names != names:  # pragma: no cover - same model on both sides
            raise SchedulerError("the executors compiled a different model", field="model")
        pcols = [p_column(n) for n in names]
        m = len(rates)
        per = max(1, chunk_rows // max(1, m))
        for batch in batches:
            ids = batch["config_id"].to_numpy(dtype=np.int64)
            P = batch[pcols].to_numpy(dtype=np.int64)
            for s in range(0, len(ids), per):
                k = len(ids[s:s + per])
                yield _table(compiled, np.repeat(ids[s:s + per], m), np.repeat(P[s:s + per], m, axis=0),
                             np.tile(rates, k))
    return predict_partition


def spark_predictions(spark, model: JobModel, space: ConfigSpace, rates: np.ndarray, *,
                      start: int = 0, stop: int | None = None, partitions: int | None = None,
                      chunk_rows: int = 50_000):
    """The sweep over configurations ``start..stop-1`` as a (lazy) Spark DataFrame with the
    prediction table's schema: the configurations are partitioned across the executors and each
    partition compiles the model once and predicts its configurations at every rate with
    ``mapInPandas`` (chunks of at most ``chunk_rows`` rows)."""
    rates = np.asarray(rates, dtype=float)
    configs = spark_configs(spark, space, start, stop, partitions)
    fn = _partition_predictor(model, tuple(space.names), rates, chunk_rows)
    return configs.mapInPandas(fn, spark_schema(space.names))


def iter_spark_predictions(spark, model: JobModel, space: ConfigSpace, rates: np.ndarray, *,
                           block_rows: int = 1_000_000, partitions: int | None = None,
                           chunk_rows: int = 50_000) -> Iterator[pd.DataFrame]:
    """The sweep computed on Spark, brought back to the driver in row order, one block of about
    ``block_rows`` rows (at least one configuration at every rate) at a time: one Spark job per
    block, so the driver holds one block at a time."""
    rates = np.asarray(rates, dtype=float)
    per_block = max(1, int(block_rows) // max(1, len(rates)))
    pcols = [p_column(n) for n in space.names]
    for start in range(0, space.size, per_block):
        stop = min(space.size, start + per_block)
        frame = spark_predictions(spark, model, space, rates, start=start, stop=stop,
                                  partitions=partitions, chunk_rows=chunk_rows).toPandas()
        # Arrow hands NaN back as NaN and null strings as None; restore the local dtypes and order.
        # Within a configuration the rows keep their emission (rate) order: a stable sort suffices.
        frame = frame.sort_values("config_id", kind="mergesort").reset_index(drop=True)
        for col in ["config_id", *pcols, "instances"]:
            frame[col] = frame[col].astype(np.int64)
        frame["saturated"] = frame["saturated"].astype(bool)
        frame["bottleneck"] = frame["bottleneck"].astype(object).where(frame["bottleneck"].notna(), None)
        yield frame
