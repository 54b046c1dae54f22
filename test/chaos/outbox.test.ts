/**
 * Short runs of the outbox chaos scenario (chaos/outbox-scenario.ts): SQLite poll → a Conveyor
 * queue in PostgreSQL (two relays, one lease holder; the target server restarted), and PostgreSQL
 * cdc → a Redis stream (Redis SIGKILLed; the combination where cdc once left delivered rows
 * behind). Each: a producer committing (and rolling back) business rows with their events, relays
 * SIGKILLed — at least twice by the runner (minRelayKills), some also at the relay-after-publish
 * failpoint — and the target taken down and restarted, then the drain and the checker (every
 * committed event delivered, none uncommitted, per-key order, the outbox drained).
 * OUTBOX_CHAOS_SECONDS (default 5) of faults each, both runs at once (each has its own servers;
 * about 20 s of wall time here); the seed is CHAOS_SEED or a fixed one;
 * `npm run chaos -- --scenario outbox --source S --target T --seed N` replays a run. RabbitMQ
 * (slow to boot and to restart) is left to the 150 s runs and to test/outbox/failures.test.ts.
 */
import { describe, expect, it } from "vitest";
import { formatOutboxTable, runOutboxScenario, type OutboxSourceKind, type OutboxTargetKind } from "../../chaos/outbox-scenario.js";
import { parseSeed } from "../../chaos/prng.js";

const SECONDS = Number(process.env.OUTBOX_CHAOS_SECONDS ?? 5);
const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261201");

const COMBINATIONS: Array<[OutboxSourceKind, OutboxTargetKind]> = [
  ["sqlite-poll", "queue"],
  ["pg-cdc", "redis"],
];

describe.concurrent("outbox chaos, short runs", () => {
  for (const [source, target] of COMBINATIONS) {
    it(`${source} → ${target}: every committed event delivered, none uncommitted, per-key order kept`, { timeout: (SECONDS + 200) * 1000 }, async () => {
      const result = await runOutboxScenario({ seconds: SECONDS, seed: SEED, source, target, minRelayKills: 2, log: () => undefined });
      const table = formatOutboxTable(result);
      console.log(table);
      expect(result.ok, `seed ${SEED}\n${table}`).toBe(true);
      const committed = Number(result.rows.find(([label]) => label.startsWith("committed events"))?.[1]);
      expect(committed).toBeGreaterThan(0);
      expect(result.relayKills).toBeGreaterThanOrEqual(2);
    });
  }
});
