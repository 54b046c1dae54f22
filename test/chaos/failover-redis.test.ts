/**
 * Short failover runs on Redis (issue 19): a real Redis Cluster (3 masters + 1 replica each)
 * whose chaos-queue master is SIGKILLed under load and whose slot is then moved to another master
 * (redis-cli --cluster reshard), a primary + replica + 3 sentinels whose primary is SIGKILLed, and a
 * rollout of 4 workers over 4 queues on one Redis (SIGTERM one at a time).
 * Every chaos bound holds (lost = 0, no stranded job, no duplicate the faults do not explain) and
 * the fleet comes back by itself. About 60 s.
 */
import { afterAll, describe, it } from "vitest";
import { findRedisServer } from "../helpers/redis.js";
import { TempDirs } from "../helpers/temp.js";
import { shortFailoverRun } from "./failover-short.js";

const temp = new TempDirs("conveyor-failover-redis-");
let keepEvidence = false;
afterAll(async () => {
  if (!keepEvidence) await temp.removeAll();
});
const noRedis = findRedisServer() === null;
const keep = () => {
  keepEvidence = true;
};

describe.skipIf(noRedis)(`failover, short runs: Redis${noRedis ? " (skipped: no redis-server)" : ""}`, () => {
  // The reshard moves the 4,773 slots up to the queue's ({chaos}: slot 4772), several round trips
  // each: 16 s on a quiet machine, about 110 s at a load average of 31 (6 busy loops beside other
  // work), which with the start, the failover and the drain outgrew a 180 s cap.
  it("redis-cluster-failover: master SIGKILLed, replica promoted, then the queue's slot resharded", { timeout: 360_000 }, async () => {
    await shortFailoverRun(temp, "redis-cluster-failover", { seconds: 30, onFailure: keep });
  });
  it("redis-sentinel-failover: primary SIGKILLed, the sentinels promote the replica, the backend follows", { timeout: 150_000 }, async () => {
    await shortFailoverRun(temp, "redis-sentinel-failover", { seconds: 14, onFailure: keep });
  });
  it("rolling-restart on one Redis: 4 workers over 4 queues SIGTERMed one at a time", { timeout: 180_000 }, async () => {
    await shortFailoverRun(temp, "rolling-restart", { seconds: 16, backend: "redis", workers: 4, onFailure: keep });
  });
});
