package augury.flink.jobs;

import java.util.concurrent.locks.LockSupport;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

/**
 * augury's Flink test job: Source -> (rebalance) Enrich -> (hash by key) Aggregate -> (rebalance) Sink.
 *
 * <p>Records are (sequence, key, emit time ms). The source emits at a fixed rate (rate limiter, total over
 * its subtasks). Enrich and Aggregate each wait a fixed time per record (LockSupport.parkNanos: an
 * external call that costs no CPU), so one instance serves at most 1000 / wait_ms records/s and the
 * capacity of a stage is parallelism x 1000 / wait_ms. Keys are uniform over --keys values (a
 * multiplicative hash of the sequence number). The sink records end-to-end latency (now - emit time) as
 * cumulative counters e2eLatencySumMs / e2eLatencyCount (exact mean per window) and a histogram
 * e2eLatencyMs over its last 2000 records.
 *
 * <p>Arguments: --rate R (records/s) --enrich-ms W1 --aggregate-ms W2 --keys K --p-source P0
 * --p-enrich P1 --p-aggregate P2 --p-sink P3 --name NAME --max-parallelism M
 */
public final class SleepPipeline {

    private SleepPipeline() {}

    static String arg(String[] args, String name, String dflt) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--" + name)) {
                return args[i + 1];
            }
        }
        return dflt;
    }

    /** Waits a fixed time without burning CPU (like a call to an external service). */
    static void waitMicros(long micros) {
        if (micros <= 0) {
            return;
        }
        long deadline = System.nanoTime() + micros * 1000L;
        long left;
        while ((left = deadline - System.nanoTime()) > 0) {
            LockSupport.parkNanos(left);
        }
    }

    public static final class Emit implements GeneratorFunction<Long, Tuple3<Long, Integer, Long>> {
        private final int keys;

        Emit(int keys) {
            this.keys = keys;
        }

        @Override
        public Tuple3<Long, Integer, Long> map(Long seq) {
            long h = seq * 0x9E3779B97F4A7C15L;
            int key = (int) Long.remainderUnsigned(h >>> 17, keys);
            return Tuple3.of(seq, key, System.currentTimeMillis());
        }
    }

    public static final class Enrich extends RichMapFunction<Tuple3<Long, Integer, Long>, Tuple3<Long, Integer, Long>> {
        private final long waitMicros;

        Enrich(long waitMicros) {
            this.waitMicros = waitMicros;
        }

        @Override
        public Tuple3<Long, Integer, Long> map(Tuple3<Long, Integer, Long> t) {
            waitMicros(waitMicros);
            return t;
        }
    }

    public static final class Aggregate
            extends KeyedProcessFunction<Integer, Tuple3<Long, Integer, Long>, Tuple3<Long, Integer, Long>> {
        private final long waitMicros;
        private transient ValueState<Long> count;

        Aggregate(long waitMicros) {
            this.waitMicros = waitMicros;
        }

        @Override
        public void open(OpenContext ctx) {
            count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
        }

        @Override
        public void processElement(Tuple3<Long, Integer, Long> t, Context ctx,
                                   Collector<Tuple3<Long, Integer, Long>> out) throws Exception {
            waitMicros(waitMicros);
            Long c = count.value();
            count.update(c == null ? 1L : c + 1L);
            out.collect(t);
        }
    }

    public static final class LatencySink extends RichMapFunction<Tuple3<Long, Integer, Long>, Long> {
        private transient Counter sumMs;
        private transient Counter count;
        private transient Histogram histogram;

        @Override
        public void open(OpenContext ctx) {
            sumMs = getRuntimeContext().getMetricGroup().counter("e2eLatencySumMs");
            count = getRuntimeContext().getMetricGroup().counter("e2eLatencyCount");
            histogram = getRuntimeContext().getMetricGroup()
                    .histogram("e2eLatencyMs", new DescriptiveStatisticsHistogram(2000));
        }

        @Override
        public Long map(Tuple3<Long, Integer, Long> t) {
            long latency = Math.max(0L, System.currentTimeMillis() - t.f2);
            sumMs.inc(latency);
            count.inc();
            histogram.update(latency);
            return latency;
        }
    }

    public static void main(String[] args) throws Exception {
        double rate = Double.parseDouble(arg(args, "rate", "100"));
        long enrichMicros = Math.round(1000.0 * Double.parseDouble(arg(args, "enrich-ms", "5")));
        long aggregateMicros = Math.round(1000.0 * Double.parseDouble(arg(args, "aggregate-ms", "5")));
        int keys = Integer.parseInt(arg(args, "keys", "1000"));
        int pSource = Integer.parseInt(arg(args, "p-source", "1"));
        int pEnrich = Integer.parseInt(arg(args, "p-enrich", "1"));
        int pAggregate = Integer.parseInt(arg(args, "p-aggregate", "1"));
        int pSink = Integer.parseInt(arg(args, "p-sink", "1"));
        int maxParallelism = Integer.parseInt(arg(args, "max-parallelism", "128"));
        String name = arg(args, "name", "augury-sleep-pipeline");

        StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
        env.setMaxParallelism(maxParallelism);
        TypeInformation<Tuple3<Long, Integer, Long>> type = Types.TUPLE(Types.LONG, Types.INT, Types.LONG);
        DataGeneratorSource<Tuple3<Long, Integer, Long>> source = new DataGeneratorSource<>(
                new Emit(keys), Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), type);

        DataStream<Tuple3<Long, Integer, Long>> events = env
                .fromSource(source, WatermarkStrategy.noWatermarks(), "Source")
                .uid("source").setParallelism(pSource);
        DataStream<Tuple3<Long, Integer, Long>> enriched = events.rebalance()
                .map(new Enrich(enrichMicros)).returns(type)
                .name("Enrich").uid("enrich").setParallelism(pEnrich);
        DataStream<Tuple3<Long, Integer, Long>> aggregated = enriched
                .keyBy(t -> t.f1, Types.INT)
                .process(new Aggregate(aggregateMicros)).returns(type)
                .name("Aggregate").uid("aggregate").setParallelism(pAggregate);
        aggregated.rebalance()
                .map(new LatencySink()).returns(Types.LONG)
                .name("Sink").uid("sink").setParallelism(pSink)
                .sinkTo(new DiscardingSink<>()).name("Discard").uid("discard").setParallelism(pSink);
        env.execute(name);
    }
}
