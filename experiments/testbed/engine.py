"""The model's engine CPU (``resources.engine_cpu_ms_per_tuple``) as threads the testbed runs.

``modeler.queueing`` charges e core-ms per job input tuple to ``cores`` extra threads that share
the cores with the instances ("Shared cores", engine CPU). The testbed has no such term of its
own; ``with_engine_threads`` writes it out as what it stands for: an operator of ``cores``
instances fed every input tuple (selectivity 1 from each source, shuffled), each tuple e ms of
pure CPU work, with no output. Simulating that model is the ground truth for the term. The extra
operator shows in the testbed's metrics under ``ENGINE_OPERATOR`` (a real engine reports no such
operator: compare operators other than it).
"""

from __future__ import annotations

from dataclasses import replace

from modeler.modelfile import JobModel, model_to_dict, parse_model

ENGINE_OPERATOR = "_engine_threads"


def with_engine_threads(model: JobModel) -> JobModel:
    """``model`` with its engine CPU as an explicit operator of ``cores`` instances (module
    docstring) and the term itself removed; ``model`` unchanged without cores or engine CPU."""
    e = float(model.engine_cpu_ms_per_tuple)
    if model.cores is None or e <= 0:
        return model
    k = max(1, int(round(model.cores)))
    raw = model_to_dict(replace(model, engine_cpu_ms_per_tuple=0.0))
    raw["operators"].append({"name": ENGINE_OPERATOR, "parallelism": k, "min_parallelism": k, "max_parallelism": k,
                             "service_time_ms": e, "cpu_share": 1.0})
    raw["edges"] = list(raw["edges"]) + [{"from": s.name, "to": ENGINE_OPERATOR, "grouping": "shuffle",
                                          "selectivity": 1.0} for s in model.sources]
    return parse_model(raw, source=f"{model.job} (engine CPU as {k} threads)")
