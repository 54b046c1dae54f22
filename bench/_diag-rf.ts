import { Redis } from "ioredis";
import { RedisBackend } from "../src/backend/redis/backend.js";
import { normalizeQueueLimits } from "../src/core/flow.js";
import { buildJobSpec } from "../src/core/spec.js";
import { silentLogger } from "../src/index.js";
import { startThrowawayRedis } from "../testkit/servers/redis.js";

const server = await startThrowawayRedis({ persistence: "none" });
const info = new Redis(server.url);
const evalUsec = async () => Number(/cmdstat_evalsha:calls=\d+,usec=(\d+)/.exec(await info.info("commandstats"))![1]);
const best: Record<string, number[][]> = {};
const JOBS = Number(process.argv[2] ?? 20000);
for (const arm of (process.argv[3] ?? "plain,limits,group,limiter,keyed").split(",")) {
  const b = new RedisBackend({ connection: server.url, logger: silentLogger, prefix: `d${Math.random()}` });
  await b.migrate();
  if (arm !== "plain") await b.setQueueLimits("bench", normalizeQueueLimits({ rate: { max: 1_000_000, durationMs: 1_000 }, maxRunning: 100_000, maxRunningPerName: { noop: 100_000 } }));
  for (let s = 0; s < JOBS; s += 1000) {
    await b.enqueue(Array.from({ length: 1000 }, (_, k) => buildJobSpec({ queue: "bench", name: "noop", data: { i: s + k }, options: { ...(arm === "keyed" || arm === "group" ? { group: { key: `g${(s + k) % 10}`, concurrency: 10_000 } } : {}), ...(arm === "keyed" || arm === "limiter" ? { limiter: { key: `k${(s + k) % 10}`, max: 1_000_000, durationMs: 1_000 } } : {}) } })));
  }
  let claimU = 0, completeU = 0, n = 0;
  for (;;) {
    const u0 = await evalUsec();
    const got = await b.claim({ queues: ["bench"], names: ["noop"], worker: { id: "w", host: "h", pid: 1 }, limit: 50, leaseMs: 60_000 });
    const u1 = await evalUsec();
    if (got.length === 0) break;
    await b.complete(got.map((c) => ({ lease: c.lease, result: null })));
    const u2 = await evalUsec();
    claimU += u1 - u0; completeU += u2 - u1; n += got.length;
  }
  const prof = await info.hgetall("prof"); await info.del("prof");
  console.log(Object.entries(prof).sort().map(([k, v]) => `${k} ${(Number(v) / n * 1000).toFixed(0)}`).join(" | "));
  console.log(`${arm}: claim usec/1000 jobs ${(claimU / n * 1000).toFixed(0)}, complete ${(completeU / n * 1000).toFixed(0)}`);
  (best[arm] ??= []).push([claimU / n * 1000, completeU / n * 1000]);
  await b.close();
}
for (const [arm, v] of Object.entries(best)) console.log(`MIN ${arm}: claim ${Math.min(...v.map((x) => x[0])).toFixed(0)} complete ${Math.min(...v.map((x) => x[1])).toFixed(0)}`);
info.disconnect();
await server.stop();
