package augury.flink.jobs;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.ExplainDetail;
import org.apache.flink.table.api.StatementSet;
import org.apache.flink.table.api.TableEnvironment;

/**
 * augury's Nexmark-style Flink SQL jobs: the operators are Flink's own SQL runtime (Calc, window
 * aggregates, window join), the input is the built-in {@code datagen} connector, the output the
 * built-in {@code blackhole} connector.
 *
 * <p>Tables (a reduced Nexmark schema; every table gets a processing-time-like event time
 * {@code dateTime = CURRENT_TIMESTAMP} at generation with a 1 s watermark delay, so event-time
 * windows fire in real time):
 *
 * <ul>
 *   <li>{@code bid(auction, bidder, price, channel, url, dateTime, extra)}: auction uniform over
 *       [1000, 1000 + keys), bidder over [1000, 1000 + 10 keys), price over [1, 10 000 000];
 *   <li>{@code auction(id, itemName, initialBid, reserve, dateTime, seller, category, extra)}:
 *       seller uniform over [1000, 1000 + keys);
 *   <li>{@code person(id, name, emailAddress, city, state, dateTime, extra)}: id uniform over
 *       [1000, 1000 + keys) (so q8's join on seller = id finds matches).
 * </ul>
 *
 * <p>Queries: q1 (projection, price in euro), q2 (selective filter MOD(auction, 123) = 0), q5 (hot
 * items: bids per auction over a 10 s HOP window sliding by 2 s, then the most bids per window), q8
 * (persons who opened an auction in the same 10 s tumbling window: a window join).
 *
 * <p>Operator chaining is OFF ({@code pipeline.operator-chaining.enabled: false}) unless
 * {@code --chaining true}: with one default parallelism the planner's FORWARD edges would chain q1
 * and q2 into a single vertex (source, calc and sink together), and per-operator busy time could not
 * be measured. Unchained, every SQL operator is its own vertex; FORWARD edges stay FORWARD (same
 * parallelism, one-to-one channels) and the keyed exchanges (HASH) are where operators can scale
 * apart.
 *
 * <p>Arguments: --query q1|q2|q5|q8 --rate R (rows/s per datagen table, total over its subtasks)
 * [--person-rate R] (rows/s of the person table; default --rate) --parallelism P (every operator) --max-parallelism M (key groups) --keys K (distinct auction /
 * seller / person ids) --name NAME (job name) [--chaining true|false] [--explain] (print the
 * JSON execution plan and exit, no cluster needed).
 */
public final class NexmarkSql {

    private NexmarkSql() {}

    static String arg(String[] args, String name, String dflt) {
        for (int i = 0; i + 1 < args.length; i++) {
            if (args[i].equals("--" + name)) {
                return args[i + 1];
            }
        }
        return dflt;
    }

    static boolean flag(String[] args, String name) {
        for (String a : args) {
            if (a.equals("--" + name)) {
                return true;
            }
        }
        return false;
    }

    static String datagen(long rate, int sourceParallelism, String fields) {
        String scan = sourceParallelism > 0 ? ", 'scan.parallelism' = '" + sourceParallelism + "'" : "";
        return " WITH ('connector' = 'datagen', 'rows-per-second' = '" + rate + "'" + scan + fields + ")";
    }

    static String range(String field, long min, long max) {
        return ", 'fields." + field + ".kind' = 'random', 'fields." + field + ".min' = '" + min
                + "', 'fields." + field + ".max' = '" + max + "'";
    }

    static String length(String field, int chars) {
        return ", 'fields." + field + ".length' = '" + chars + "'";
    }

    /** The event time of a generated row: the wall clock when it is generated (ms precision). */
    static final String EVENT_TIME =
            "  `dateTime` AS CAST(CURRENT_TIMESTAMP AS TIMESTAMP(3)),\n"
                    + "  WATERMARK FOR `dateTime` AS `dateTime` - INTERVAL '1' SECOND\n";

    static void createTables(TableEnvironment tEnv, long rate, long personRate, int sourceParallelism, long keys) {
        long lo = 1000L;
        long hi = lo + keys - 1;
        tEnv.executeSql("CREATE TABLE bid (\n  auction BIGINT, bidder BIGINT, price BIGINT,\n"
                + "  channel STRING, url STRING, extra STRING,\n" + EVENT_TIME + ")"
                + datagen(rate, sourceParallelism, range("auction", lo, hi) + range("bidder", lo, lo + 10 * keys - 1)
                        + range("price", 1, 10_000_000) + length("channel", 8) + length("url", 40)
                        + length("extra", 20)));
        tEnv.executeSql("CREATE TABLE auction (\n  id BIGINT, itemName STRING, initialBid BIGINT,\n"
                + "  reserve BIGINT, seller BIGINT, category BIGINT, extra STRING,\n" + EVENT_TIME + ")"
                + datagen(rate, sourceParallelism, range("id", lo, lo + 1000 * keys) + range("seller", lo, hi)
                        + range("initialBid", 1, 1000) + range("reserve", 1, 10_000)
                        + range("category", 10, 20) + length("itemName", 20) + length("extra", 20)));
        tEnv.executeSql("CREATE TABLE person (\n  id BIGINT, name STRING, emailAddress STRING,\n"
                + "  city STRING, state STRING, extra STRING,\n" + EVENT_TIME + ")"
                + datagen(personRate, sourceParallelism, range("id", lo, hi) + length("name", 16) + length("emailAddress", 24)
                        + length("city", 12) + length("state", 2) + length("extra", 20)));
    }

    static String sink(String name, String columns) {
        return "CREATE TABLE " + name + " (" + columns + ") WITH ('connector' = 'blackhole')";
    }

    /** Adds the query's sink table and INSERT to the statement set. */
    static void addQuery(TableEnvironment tEnv, StatementSet set, String query) {
        switch (query) {
            case "q1":
                tEnv.executeSql(sink("q1_sink", "auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), "
                        + "`dateTime` TIMESTAMP(3), extra STRING"));
                set.addInsertSql("INSERT INTO q1_sink SELECT auction, bidder, 0.908 * price AS price, "
                        + "`dateTime`, extra FROM bid");
                break;
            case "q2":
                tEnv.executeSql(sink("q2_sink", "auction BIGINT, price BIGINT"));
                set.addInsertSql("INSERT INTO q2_sink SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0");
                break;
            case "q5":
                // Nexmark q5 joins each window's counts with the window's maximum; this keeps the two
                // keyed stages (count per auction and window, then max per window), without the
                // self-join, so the graph is a keyed pipeline.
                tEnv.executeSql(sink("q5_sink", "starttime TIMESTAMP(3), endtime TIMESTAMP(3), maxn BIGINT"));
                set.addInsertSql("INSERT INTO q5_sink\n"
                        + "SELECT starttime, endtime, MAX(num) AS maxn FROM (\n"
                        + "  SELECT auction, COUNT(*) AS num, window_start AS starttime, window_end AS endtime\n"
                        + "  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(`dateTime`), INTERVAL '2' SECOND, INTERVAL '10' SECOND))\n"
                        + "  GROUP BY auction, window_start, window_end\n"
                        + ") GROUP BY starttime, endtime");
                break;
            case "q8":
                tEnv.executeSql(sink("q8_sink", "id BIGINT, name STRING, starttime TIMESTAMP(3)"));
                set.addInsertSql("INSERT INTO q8_sink\n"
                        + "SELECT P.id, P.name, P.starttime FROM (\n"
                        + "  SELECT id, name, window_start AS starttime, window_end AS endtime\n"
                        + "  FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))\n"
                        + "  GROUP BY id, name, window_start, window_end\n"
                        + ") P JOIN (\n"
                        + "  SELECT seller, window_start AS starttime, window_end AS endtime\n"
                        + "  FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(`dateTime`), INTERVAL '10' SECOND))\n"
                        + "  GROUP BY seller, window_start, window_end\n"
                        + ") A ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime");
                break;
            default:
                throw new IllegalArgumentException("--query must be q1, q2, q5 or q8, not " + query);
        }
    }

    public static void main(String[] args) throws Exception {
        String query = arg(args, "query", "q1");
        long rate = Long.parseLong(arg(args, "rate", "1000"));
        long personRate = Long.parseLong(arg(args, "person-rate", String.valueOf(rate)));
        int parallelism = Integer.parseInt(arg(args, "parallelism", "1"));
        int maxParallelism = Integer.parseInt(arg(args, "max-parallelism", "128"));
        long keys = Long.parseLong(arg(args, "keys", "10000"));
        int sourceParallelism = Integer.parseInt(arg(args, "source-parallelism", "0"));
        boolean chaining = Boolean.parseBoolean(arg(args, "chaining", "false"));
        String name = arg(args, "name", "augury-nexmark-" + query);

        Configuration conf = new Configuration();
        conf.setString("pipeline.name", name);
        conf.setString("parallelism.default", String.valueOf(parallelism));
        conf.setString("table.exec.resource.default-parallelism", String.valueOf(parallelism));
        conf.setString("pipeline.max-parallelism", String.valueOf(maxParallelism));
        conf.setString("pipeline.operator-chaining.enabled", String.valueOf(chaining));
        TableEnvironment tEnv = TableEnvironment.create(
                EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(conf).build());
        createTables(tEnv, rate, personRate, sourceParallelism, keys);
        StatementSet set = tEnv.createStatementSet();
        addQuery(tEnv, set, query);
        if (flag(args, "explain")) {
            System.out.println(set.explain(ExplainDetail.JSON_EXECUTION_PLAN));
            return;
        }
        // Submits and returns (the REST jar run does not wait for the job to finish).
        set.execute();
    }
}
