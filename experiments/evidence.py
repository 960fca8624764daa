"""What each experiment's evidence rests on, stated once for ``docs/RESULTS.md``.

For every experiment: what the ground truth is, what each policy or model is given, the sample
sizes and intervals reported, and what could still bias the result. ``experiments.results``
renders these under each experiment's heading; they describe the experiment's design (its module
docstring has the details), the run's own figures and sample sizes are in its summary and tables.
"""

from __future__ import annotations

ASPECTS = ("ground truth", "given", "sample", "could bias it")

STATEMENTS: dict[str, dict[str, str]] = {
    "accuracy": {
        "ground truth": "the testbed simulator running each example's (and seeded random DAG's) true profile; "
                        "measured max rate, throughput, mean and p99 latency at configurations calibration never saw; "
                        "the max rate of a job with several sources is measured at their rate shares (one generator "
                        "feeds them, `experiments.recording.mix_coupled`), the rate a job whose input keeps its mix "
                        "sustains.",
        "given": "augury's model is calibrated from a testbed recording through ingest -> Spark -> calibrate (two "
                 "configurations, three loads); Caladrius and DRS are fed the same calibrated profile; the "
                 "`pred_true` column predicts with the true profile, separating the queueing approximation's error "
                 "from calibration's.",
        "sample": "configurations per example drawn at random (seeded) x loads 10-95 % of the measured max rate "
                  "(measured over 600 s); each load point is warmed up and measured longer the nearer it is to "
                  "saturation, 10 s + 60 s times min(25, max(1, (0.5 / (1 - load))^2)) (x2.8 at 0.7, x11.1 at "
                  "0.85, x25 at 0.95), because a queue's relaxation time, and with it the sampling error of a mean "
                  "waiting time and the bias of a short warm-up, grows like 1/(1 - load)^2; every point carries "
                  "its batch-means standard error (`measured_se`); `errors_by_band` gives medians with "
                  "percentile-bootstrap 95 % CIs per load band (n per cell in the table) and the measurements' "
                  "median relative standard error (`measured_rel_se`).",
        "could bias it": "the testbed and the model share assumptions (per-instance FIFO queues, fixed per-hop "
                         "delay): agreement on the testbed is not agreement on an engine (flink-accuracy is); n per "
                         "example and band is 10, so the intervals are wide, most at 0.95, where a 1 % error in the "
                         "measured max rate moves the latency ~20 % (its 600 s measurement leaves ~0.25 %); the cap on "
                         "the measurement length (x25 where the relaxation-time rule asks x100 at 0.95) leaves the 0.95 "
                         "points about twice as noisy as the lower bands (compare `measured_rel_se` with the errors); "
                         "batch means with 10 batches understate the standard error when a batch is not much longer "
                         "than the queue's relaxation time; the throughput at 1.3x the max rate is "
                         "measured with each source back-pressured on its own, as an engine does, which the model "
                         "(all sources throttled in proportion) does not describe for several sources.",
    },
    "convergence": {
        "ground truth": "the reference configuration: the fewest instances meeting the run's targets by exhaustive "
                        "enumeration on the true model, confirmed on the testbed (never `scheduler.plan`).",
        "given": "every policy gets 20 minutes of history at the old rate in advisor mode; augury learns its model "
                 "once per DAG from a warm-up recording (no true model); the peers measure as they were published.",
        "sample": "runs per policy = DAGs x steps x starts x seeds (in the run's summary); shares with bootstrap "
                  "95 % CIs, over-provisioning as median, p10, p90, min and max.",
        "could bias it": "the job shapes are the bundled examples and three random DAGs; the SLO is set from the "
                         "truth so that it is attainable; seeds vary the testbed, not the learned model.",
    },
    "preemptive": {
        "ground truth": "the testbed replaying real traces (WC98, NYC taxi, AMZN tweets, AWS ELB) time-compressed; "
                        "a window violates the SLO when the sinks' p99 or the sources' backlog exceeds it, and a "
                        "restart is charged restart + backlog drain in real time, the same for every policy and "
                        "finite (a configuration below the load violates for as long as it is in force). The "
                        "hindsight bound: every window at the fewest instances meeting the SLO and 0.7 for the load "
                        "it saw, by exhaustive search on the true model. The hindsight/<s> rows: the cheapest "
                        "schedule for the actual load (priced dynamic program on the true model, augury's targets, "
                        "<s> s of violation per instance-hour, the replay's own restart charge), replayed like "
                        "every policy: what perfect foresight reaches on both axes.",
        "given": "augury learns its model per job and seed from a warm-up recording and forecasts from the trace's "
                 "history before the replay plus what it measures; its settings (forecast quantile, band) were "
                 "chosen on held-out days (`TUNING_DAYS`), not on the replayed ones. The peers see the same "
                 "windows; the oracle knows the trace.",
        "sample": "per trace: days x seeds replayed days per policy (the `days` table); means per day with "
                  "bootstrap 95 % CIs over those days (`by_trace`); issue 20's goals per job and trace (`goals`).",
        "could bias it": "one job shape (WordCount, skewed and uniform keys); restarts cost a fixed 30 s (no state); "
                         "time compression at 960x; only three days per trace, so day-to-day variation dominates "
                         "the intervals. The hindsight schedules plan no load violation and pick among the planner's "
                         "configurations at three prices, so their frontier is an upper bound on the best reachable "
                         "(a schedule that ran under-provisioned, or a price between, could do a little better).",
    },
    "preemptive-stateful": {
        "ground truth": "the testbed replaying the real traces on WordCount with keyed state: every change restores "
                        "the job's state, so a restart lasts 30 s + state / 10 MB/s (60, 150, 300 s), charged restart "
                        "+ backlog drain for every policy alike.",
        "given": "augury learns its model from a warm-up recording and is given the state size and restore rate (as "
                 "Flink's checkpoint statistics and measured restarts would give it); augury/shift may move priced "
                 "changes to lower load; the Flink rules as published (they do not use restart times).",
        "sample": "replays per policy = traces x restart times x seeds (in the runs table); the load at a change "
                  "with a bootstrap 95 % CI over the replays.",
        "could bias it": "the restart model is known to augury rather than fitted from its own restarts; one job "
                         "shape; the shift's exchange rate (60 s of violation per instance-hour) is augury's own.",
    },
    "forecast": {
        "ground truth": "the real traces' own next values (rolling origin: the forecaster never sees what it is "
                        "scored on).",
        "given": "the auto forecaster and seasonal naive get the same history up to each origin.",
        "sample": "origins and points per trace in the table; MASE, sMAPE and quantile coverage, no intervals.",
        "could bias it": "four traces only; the 2-hour horizon is shorter than what a day-ahead schedule needs.",
    },
    "healing": {
        "ground truth": "faults injected into the testbed at a known time, instance and key.",
        "given": "augury's loop runs on the model learned from a warm-up recording; Dhalion as published "
                 "(back-pressure detection, bottleneck scale-up; no slow-instance or skew diagnoser).",
        "sample": "per job (WordCount, the clickstream pipeline), fault and policy: 5 runs with different seeds "
                  "(the `summary` table gives shares of runs and medians; every run is in `runs`).",
        "could bias it": "two fault kinds (no slow host, network or lost-host faults yet: issue 26), two jobs, one "
                         "load (0.8 of the default max rate) and one hot-key share (50 %); recovery depends on how "
                         "the testbed models an instance restart (a fresh host). Five runs per cell bound a share "
                         "only coarsely (5 of 5 has a 95 % Wilson interval of 57-100 %).",
    },
    "flink-accuracy": {
        "ground truth": "a real Apache Flink cluster on this machine (loopback).",
        "given": "the model is calibrated from the cluster's live metrics only.",
        "sample": "configurations per measurement in the table; one run (a live cluster is not deterministic).",
        "could bias it": "the job's operators sleep (no CPU contention): it does not test cores shared between "
                         "instances (issue 23); other load on the machine shows up in the numbers.",
    },
    "flink-sql": {
        "ground truth": "Flink's own SQL runtime (Nexmark-style q1 projection, q2 filter, q5 hot items, q8 window "
                        "join over `datagen` -> `blackhole`) on a real local cluster: one TaskManager, 8 slots, on "
                        "this machine's 2 cores (loopback); max sustainable rate = the job input that flows while "
                        "the datagen asks for far more (sources back-pressured), averaged over a few windows.",
        "given": "per query, the model is calibrated from <= 3 live configurations, each at its own saturation "
                 "(the datagen asking far more; never a test configuration), topology read from the live "
                 "job, `resources: {cores: 2}`, the datagen's CPU per tuple from its own threads and the "
                 "operators' CPU share from the TaskManager's CPU; the model is then levelled to the max rates "
                 "measured at those calibration configurations (one capacity scale per query; the unscaled "
                 "predictions are reported beside); DS2's linear extrapolation gets the same "
                 "calibration windows (true processing rate per instance x parallelism).",
        "sample": "5 unseen configurations per query (fewer in quick mode), 3 windows each (4 s; q8 10 s, one "
                  "TUMBLE period) in each of two passes in counterbalanced order, one run: no intervals; the "
                  "per-query medians rest on 5 numbers, and a query's job runs up to ~10 % faster or slower "
                  "from one run to the next (docs/flink.md), so the per-query verdict can flip between runs.",
        "could bias it": "one 2-core machine where the JobManager, the TaskManager's own threads, this Python "
                         "process and the datagen source (whose CPU use Flink reports as no busy time: the model "
                         "counts it from its threads' /proc CPU) share the cores the model divides among them; a source that could "
                         "not generate more is flagged `source_limited` (then the measurement is the generator's "
                         "limit, not the job's); window operators (q5, q8) work in bursts when windows fire (q5's "
                         "2 s slide fits the 4 s windows whole, q8 is read over whole 10 s periods); q8's "
                         "person-side window aggregate stalls its input at every window end, so q8 reads "
                         "0.15-0.5 back pressure at 300 000/s in every configuration measured up to 22 "
                         "instances (0.07 at 100 000/s): the one step's back-pressure verdict fails on q8 "
                         "whatever the plan (a datagen paced per millisecond did not change it; docs/flink.md, "
                         "\"q8's back pressure is its window aggregation\"); other load on the machine shows up "
                         "in the numbers.",
    },
}
"""Experiment name -> aspect (``ASPECTS``) -> statement."""


def lines(name: str) -> list[str]:
    """The markdown list for ``name`` (empty when there is no statement)."""
    found = STATEMENTS.get(name)
    if not found:
        return []
    return [f"- **{aspect}**: {found[aspect]}" for aspect in ASPECTS if aspect in found]
