/**
 * Short runs of the outbox chaos scenario (chaos/outbox-scenario.ts) for the sources and targets
 * beyond the default PostgreSQL poll → Redis stream: SQLite poll → RabbitMQ, and PostgreSQL cdc →
 * a Conveyor queue. Each: a producer committing (and rolling back) business rows with their
 * events, relays SIGKILLed (some at the relay-after-publish failpoint), the target taken down and
 * restarted, then the drain and the checker (every committed event delivered, none uncommitted,
 * per-key order). OUTBOX_CHAOS_SECONDS (default 6) of faults each, both runs at once (each has its own servers); the seed is CHAOS_SEED or a
 * fixed one; `npm run chaos -- --scenario outbox --source S --target T --seed N` replays a run.
 */
import { describe, expect, it } from "vitest";
import { formatOutboxTable, runOutboxScenario, type OutboxSourceKind, type OutboxTargetKind } from "../../chaos/outbox-scenario.js";
import { parseSeed } from "../../chaos/prng.js";

const SECONDS = Number(process.env.OUTBOX_CHAOS_SECONDS ?? 6);
const SEED = parseSeed(process.env.CHAOS_SEED ?? "20261201");

const COMBINATIONS: Array<[OutboxSourceKind, OutboxTargetKind]> = [
  ["sqlite-poll", "rabbitmq"],
  ["pg-cdc", "queue"],
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
