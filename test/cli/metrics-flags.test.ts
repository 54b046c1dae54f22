/** The metrics flags of `conveyor worker` and `conveyor serve`: checked before anything starts. */
import { describe, expect, it } from "vitest";
import { UsageError } from "../../src/cli/args.js";
import { metricsSettings } from "../../src/cli/metrics.js";
import { runCli } from "../helpers/cli.js";

describe("metrics flags", () => {
  it("parse into settings, with the documented defaults", () => {
    expect(metricsSettings({})).toBeNull();
    expect(metricsSettings({ "metrics-port": "9464" })).toEqual({ port: 9464, host: "127.0.0.1", storeCacheMs: undefined, policy: undefined, store: true });
    expect(
      metricsSettings({
        "metrics-port": "0",
        "metrics-host": "0.0.0.0",
        "metrics-store-cache-ms": "2000",
        "scale-target-age-seconds": "30",
        "scale-jobs-per-second": "2.5",
        "scale-max-workers": "20",
      }),
    ).toEqual({
      port: 0,
      host: "0.0.0.0",
      storeCacheMs: 2000,
      policy: { targetAgeSeconds: 30, jobsPerSecondPerWorker: 2.5, maxWorkers: 20 },
      store: true,
    });
    expect(metricsSettings({ "metrics-port": "1", "metrics-no-store": true })).toMatchObject({ store: false });
  });

  it("refuse what cannot work, saying what to pass", () => {
    const refused = (values: Record<string, unknown>, message: RegExp) => {
      expect(() => metricsSettings(values)).toThrow(UsageError);
      expect(() => metricsSettings(values)).toThrow(message);
    };
    refused({ "metrics-host": "0.0.0.0" }, /--metrics-host needs --metrics-port/);
    refused({ "metrics-port": "9464", "scale-target-age-seconds": "30" }, /go together: desiredWorkers needs both/);
    refused({ "metrics-port": "9464", "scale-max-workers": "5" }, /need --scale-target-age-seconds and --scale-jobs-per-second/);
    refused({ "metrics-port": "9464", "metrics-store-cache-ms": "100" }, /--metrics-store-cache-ms must be an integer >= 1000/);
    refused({ "metrics-port": "9464", "scale-target-age-seconds": "0", "scale-jobs-per-second": "1" }, /--scale-target-age-seconds must be a positive number/);
    refused(
      { "metrics-port": "9464", "metrics-no-store": true, "scale-target-age-seconds": "30", "scale-jobs-per-second": "1" },
      /--metrics-no-store leaves out the store's figures/,
    );
    refused(
      { "metrics-port": "9464", "scale-target-age-seconds": "30", "scale-jobs-per-second": "1", "scale-min-workers": "9", "scale-max-workers": "3" },
      /is above --scale-max-workers/,
    );
  });

  it("conveyor worker exits 2 on a bad metrics flag before touching the store, and says why", async () => {
    const r = await runCli(["worker", "--db", "sqlite::memory:", "--queue", "q", "--handlers", "test/fixtures/handlers.ts", "--metrics-port", "nine"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--metrics-port must be an integer >= 0; got "nine"/);
  });
});
