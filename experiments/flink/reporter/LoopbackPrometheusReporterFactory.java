package org.apache.flink.metrics.prometheus;

import java.util.Properties;

import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;
import org.apache.flink.util.PortRange;

/** Options: port (a port or range, default 9249), host (bind address, default 127.0.0.1). */
public class LoopbackPrometheusReporterFactory implements MetricReporterFactory {
    @Override
    public MetricReporter createMetricReporter(Properties properties) {
        String ports = properties.getProperty("port", "9249");
        String host = properties.getProperty("host", "127.0.0.1");
        return new LoopbackPrometheusReporter(host, new PortRange(ports));
    }
}
