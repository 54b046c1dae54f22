/**
 * The example manifests agree with the code: the worker pod's termination grace outlasts its
 * shutdown grace, KEDA reads a field the scaling endpoint answers, and every metric the alert
 * rules and the dashboard name is one Conveyor exports (or the outbox relay's lag).
 */
import { readFile } from "node:fs/promises";
import { describe, expect, it } from "vitest";
import { SqliteBackend } from "../../src/backend/sqlite/index.js";
import { ConveyorMetrics } from "../../src/observability/index.js";
import { ROOT } from "../helpers/cli.js";

const read = (path: string) => readFile(`${ROOT}/${path}`, "utf8");

describe("deploy/", () => {
  it("the worker Deployment gives SIGTERM more time than the worker's shutdown grace", async () => {
    const worker = await read("deploy/kubernetes/worker.yaml");
    const podGraceSeconds = Number(/terminationGracePeriodSeconds: (\d+)/.exec(worker)?.[1]);
    const shutdownGraceMs = Number(/--shutdown-grace-ms=(\d+)/.exec(worker)?.[1]);
    expect(shutdownGraceMs).toBeGreaterThan(0);
    // Room to release unfinished jobs and close the store after the grace: at least 5 s.
    expect(podGraceSeconds * 1000 - shutdownGraceMs).toBeGreaterThanOrEqual(5_000);
    expect(worker).toMatch(/--metrics-port=9464/);
    expect(worker).toMatch(/--metrics-host=0\.0\.0\.0/);
  });

  it("the KEDA ScaledObject polls /scaling for a field it answers, on the Service's metrics port", async () => {
    const keda = await read("deploy/kubernetes/keda-scaledobject.yaml");
    const serve = await read("deploy/kubernetes/serve.yaml");
    expect(keda).toMatch(/type: metrics-api/);
    expect(keda).toMatch(/url: "http:\/\/conveyor-serve\.default\.svc:9464\/scaling\?queue=email"/);
    expect(keda).toMatch(/valueLocation: "desiredWorkers"/);
    expect(keda).toMatch(/name: conveyor-worker-email/);
    expect(serve).toMatch(/--scale-target-age-seconds=\d+/);
    expect(serve).toMatch(/--scale-jobs-per-second=\d+/);
    expect(serve).toMatch(/\{ name: metrics, port: 9464, targetPort: metrics \}/);
  });

  it("alert rules and dashboard name only metrics Conveyor exports", async () => {
    const backend = new SqliteBackend({ path: ":memory:" });
    try {
      const metrics = new ConveyorMetrics({ backend });
      const exported = new Set(
        (await metrics.registry.getMetricsAsJSON()).flatMap((m) =>
          String(m.type) === "histogram" ? [`${m.name}_bucket`, `${m.name}_count`, `${m.name}_sum`] : [m.name],
        ),
      );
      // Defined by the outbox relay (conveyor-jobs/outbox), built separately.
      exported.add("conveyor_outbox_relay_lag_seconds");
      const used = new Set<string>();
      for (const file of ["deploy/prometheus/alerts.yml", "deploy/grafana/conveyor-dashboard.json"]) {
        for (const m of (await read(file)).matchAll(/\bconveyor_[a-z_]*[a-z]\b/g)) used.add(m[0]);
      }
      expect(used.size).toBeGreaterThan(10);
      for (const name of used) expect(exported, name).toContain(name);
    } finally {
      await backend.close();
    }
  });
});
