/**
 * Short failover runs on PostgreSQL (issue 19): a primary and a synchronous hot standby behind a
 * multi-host URL with target_session_attrs=read-write, the primary crashed under load and the
 * standby promoted; and a rollout (SIGTERM one worker at a time, the next once its replacement
 * started) of a fleet over 4 queues, 4 workers here (20 in `npm run chaos -- --scenario
 * rolling-restart`). Every chaos bound holds and the fleet comes back by itself. About 60 s.
 */
import { afterAll, describe, it } from "vitest";
import { findPostgresBin } from "../helpers/postgres.js";
import { TempDirs } from "../helpers/temp.js";
import { shortFailoverRun } from "./failover-short.js";

const temp = new TempDirs("conveyor-failover-pg-");
let keepEvidence = false;
afterAll(async () => {
  if (!keepEvidence) await temp.removeAll();
});
const noPostgres = (await findPostgresBin()) === null;
const keep = () => {
  keepEvidence = true;
};

describe.skipIf(noPostgres)(`failover, short runs: PostgreSQL${noPostgres ? " (skipped: no PostgreSQL server binaries)" : ""}`, () => {
  it(
    "pg-primary-switch: primary crashed, synchronous standby promoted; producers, workers and LISTEN reconnect by themselves",
    { timeout: 150_000 },
    async () => {
      await shortFailoverRun(temp, "pg-primary-switch", { seconds: 14, onFailure: keep });
    },
  );
  it("rolling-restart: 4 workers over 4 queues SIGTERMed one at a time", { timeout: 180_000 }, async () => {
    await shortFailoverRun(temp, "rolling-restart", { seconds: 16, backend: "postgres", workers: 4, onFailure: keep });
  });
});
