package org.apache.flink.metrics.prometheus;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.util.Iterator;

import io.prometheus.client.exporter.HTTPServer;
import org.apache.flink.util.PortRange;

/**
 * Flink's PrometheusReporter, but its HTTP server binds one address (default 127.0.0.1) instead of
 * every interface. It lives in Flink's package because the collector registry it serves is
 * package-private in AbstractPrometheusReporter; it is loaded by the same plugin class loader as the
 * wheel's flink-metrics-prometheus jar (augury copies both jars into one plugin directory).
 */
public class LoopbackPrometheusReporter extends AbstractPrometheusReporter {
    private HTTPServer httpServer;
    private int port;

    LoopbackPrometheusReporter(String host, PortRange ports) {
        Iterator<Integer> it = ports.getPortsIterator();
        while (it.hasNext()) {
            int candidate = it.next();
            try {
                httpServer = new HTTPServer(new InetSocketAddress(host, candidate), this.registry);
                port = candidate;
                log.info("Started loopback PrometheusReporter HTTP server on {}:{}.", host, candidate);
                return;
            } catch (IOException e) {
                log.debug("Could not start PrometheusReporter HTTP server on {}:{}.", host, candidate, e);
            }
        }
        throw new RuntimeException("Could not start PrometheusReporter HTTP server on " + host
                + " on any configured port. Ports: " + ports);
    }

    int getPort() {
        return port;
    }

    @Override
    public void close() {
        if (httpServer != null) {
            httpServer.stop();
        }
        super.close();
    }
}
